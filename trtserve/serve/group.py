"""A request's generations as one group, for every front end (OpenAI, KServe, gRPC, batch lines):
admit all of its prompts or none, wait for all (or stream them merged), and when one fails, the
caller is cancelled or the client disconnects, abort the others and release every admission ticket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request as HTTPRequest

from trtserve.serve.errors import APIError
from trtserve.serve.generation import GenerationRun
from trtserve.text.outputs import RequestOutput, TextDelta


def admit_all(count: int, start: Callable[[int], GenerationRun]) -> list[GenerationRun]:
    """`start(i)` for i in range(count), all or none: if one is refused, those already admitted
    give their tickets back before the refusal propagates."""
    runs: list[GenerationRun] = []
    try:
        for i in range(count):
            runs.append(start(i))
    except BaseException:
        release(runs)
        raise
    return runs


def release(runs: list[GenerationRun]) -> None:
    """Give back every run's ticket (idempotent: a run that ran has released its own already)."""
    for r in runs:
        r.ticket.release()


async def closing(events: AsyncIterator[str], runs: list[GenerationRun]) -> AsyncIterator[str]:
    """A stream's events; however it ends, the events are closed (a client that left: its engine
    requests aborted now) and the runs' tickets released (if it left before they started)."""
    try:
        async for chunk in events:
            yield chunk
    finally:
        await events.aclose()
        release(runs)


async def collect_all(runs: list[GenerationRun], http: HTTPRequest | None = None) -> list[RequestOutput]:
    """Every run's output, in order. If one fails, the caller is cancelled, or `http`'s client
    disconnects (APIError 499), the others are aborted and every ticket is released (a run
    cancelled before it started holds one)."""
    tasks = [asyncio.ensure_future(r.collect()) for r in runs]
    try:
        together = asyncio.gather(*tasks)
        return list(await (together if http is None else _unless_disconnected(http, together)))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        release(runs)


async def merged(runs: list[GenerationRun]) -> AsyncIterator[tuple[int, TextDelta]]:
    """Deltas of several runs as they arrive, tagged with the run's position. Leaving early (or a
    run failing) cancels every run, which aborts its engine request."""
    q: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump(i: int, run: GenerationRun) -> None:
        try:
            async for d in run.deltas():
                await q.put((i, d))
        except BaseException as err:  # noqa: BLE001 - forwarded to the consumer
            await q.put(err)
        finally:
            await q.put(end)

    if len(runs) == 1:  # no tasks and no queue for the common case
        deltas = runs[0].deltas()
        try:
            async for d in deltas:
                yield 0, d
        finally:
            await deltas.aclose()  # aborts the engine request now, not when the generator is collected
            release(runs)
        return
    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(runs)]
    try:
        finished = 0
        while finished < len(runs):
            item = await q.get()
            if item is end:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        release(runs)


async def _until_disconnected(http: HTTPRequest) -> None:
    """Return when the client goes away (for non-streaming responses)."""
    while True:
        message = await http.receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(http: HTTPRequest, work: asyncio.Future):
    """`work`'s result; if the client disconnects first, cancel it (which aborts its engine requests)."""
    # A gather cancelled here ends with a CancelledError nobody awaits; take it, or asyncio logs an
    # ERROR with a traceback for every client that leaves.
    work.add_done_callback(lambda f: f.cancelled() or f.exception())
    watch = asyncio.ensure_future(_until_disconnected(http))
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            return work.result()
        work.cancel()
        raise APIError(499, "the client disconnected; the request was aborted")
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
