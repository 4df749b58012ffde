"""serve/group.py, the one way every front end runs a request's prompts: admitted all or none, and
when one fails, the caller is cancelled or the client leaves, the others are aborted and every
admission ticket is given back. Checked with stand-in runs (no engine)."""

from __future__ import annotations

import asyncio

import pytest

from trtserve.serve.admission import Admission
from trtserve.serve.errors import APIError
from trtserve.serve.group import admit_all, collect_all, merged


class Run:
    """A stand-in GenerationRun: `steps` deltas a tick apart, then its output (or `fails`)."""

    def __init__(self, gate: Admission, name: str, steps: int = 3, fails: bool = False):
        self.ticket = gate.enter(1)
        self.name, self.steps, self.fails = name, steps, fails
        self.cancelled = False

    async def deltas(self):
        try:
            for i in range(self.steps):
                await asyncio.sleep(0.01)
                yield f"{self.name}{i}"
            if self.fails:
                raise APIError(504, f"{self.name} ran out of time")
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.ticket.release()

    async def collect(self) -> str:
        out = [d async for d in self.deltas()]
        return "".join(out)


class Client:
    """An HTTP request whose client leaves after `after` seconds."""

    def __init__(self, after: float):
        self.after = after

    async def receive(self):
        await asyncio.sleep(self.after)
        return {"type": "http.disconnect"}


def test_admit_all_gives_back_the_tickets_of_the_admitted_when_one_is_refused():
    gate = Admission(max_requests=2, max_tokens=100)
    with pytest.raises(APIError) as err:
        admit_all(3, lambda i: Run(gate, str(i)))
    assert err.value.status == 429
    assert (gate.in_flight, gate.queued_requests) == (0, 0)


def test_collect_all_returns_every_output_in_order():
    gate = Admission(8, 100)
    outs = asyncio.run(collect_all([Run(gate, "a", 3), Run(gate, "b", 1)]))
    assert outs == ["a0a1a2", "b0"] and gate.in_flight == 0


def test_one_failure_aborts_the_siblings_and_releases_every_ticket():
    gate = Admission(8, 100)
    runs = [Run(gate, "a", steps=1, fails=True), Run(gate, "b", steps=50)]
    with pytest.raises(APIError, match="a ran out of time"):
        asyncio.run(collect_all(runs))
    assert runs[1].cancelled and gate.in_flight == 0


def test_a_client_that_leaves_aborts_every_run_with_499():
    gate = Admission(8, 100)
    runs = [Run(gate, "a", steps=50), Run(gate, "b", steps=50)]
    with pytest.raises(APIError) as err:
        asyncio.run(collect_all(runs, Client(after=0.03)))
    assert err.value.status == 499 and all(r.cancelled for r in runs) and gate.in_flight == 0


def test_runs_never_started_give_their_tickets_back_when_the_caller_is_cancelled():
    gate = Admission(8, 100)

    async def main():
        task = asyncio.ensure_future(collect_all([Run(gate, "a", 50), Run(gate, "b", 50)]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert gate.in_flight == 0


@pytest.mark.parametrize("count", [1, 3])
def test_leaving_a_merged_stream_early_aborts_every_run(count):
    gate = Admission(8, 100)
    runs = [Run(gate, str(i), steps=50) for i in range(count)]

    async def main():
        stream = merged(runs)
        first = await anext(stream)
        await stream.aclose()
        return first

    index, delta = asyncio.run(main())
    assert delta == f"{index}0" and gate.in_flight == 0  # a run still going would hold its ticket
