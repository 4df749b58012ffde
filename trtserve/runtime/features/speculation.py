"""Speculative decoding as an engine-core feature: the scheduler asks it who speculates and with which
proposals, the engine core reports what verification kept, and its switch learns what a decode step
costs. `NoSpeculation` proposes nothing, so no chunk carries a draft and no verification runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trtserve.engine.stats import SpecCounts
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.request import Request
from trtserve.runtime.sampler import row_for
from trtserve.runtime.speculative.speculator import Speculator
from trtserve.runtime.speculative.verify import Verdict, verify

if TYPE_CHECKING:
    from trtserve.runtime.schedule import ScheduledChunk


class NoSpeculation(EngineFeature):
    def plan(self, running: list[Request], waiting: int) -> None:
        pass

    def draft(self, r: Request, limit: int) -> list[int]:
        return []

    def forget(self, r: Request) -> None:
        pass

    def scheduled(self, out) -> None:
        pass

    def step_ended(self, seconds: float) -> None:
        pass

    def verify(self, c, rows, eos_token_ids) -> Verdict:
        raise AssertionError("no chunk carries proposals without speculation")

    def stats(self) -> SpecCounts:
        return SpecCounts()


class Speculation(NoSpeculation):
    """The `speculative` option on (runtime/speculative/)."""

    def __init__(self, speculator: Speculator):
        self.speculator = speculator
        self._decode_only: tuple[int, int] | None = None  # this step's (batch, proposals) if it ran decodes only

    def plan(self, running: list[Request], waiting: int) -> None:
        self.speculator.plan(running, waiting)

    def draft(self, r: Request, limit: int) -> list[int]:
        return self.speculator.draft(r, limit)

    def forget(self, r: Request) -> None:
        self.speculator.forget(r)

    def on_verified(self, r: Request, proposed: int, accepted: int) -> None:
        self.speculator.record(r, proposed, accepted)

    def scheduled(self, out) -> None:
        """The switch learns what a step of decodes only costs, by batch size and proposals."""
        if out.chunks and all(c.start >= c.request.num_prompt_tokens for c in out.chunks):
            self._decode_only = (len(out.chunks), sum(len(c.draft) for c in out.chunks))

    def step_ended(self, seconds: float) -> None:
        """seconds: the whole step's, scheduling included."""
        if self._decode_only is not None:
            self.speculator.switch.observe(*self._decode_only, seconds)
        self._decode_only = None

    def sleep(self) -> None:
        self.speculator.sleep()  # a draft model's KV cache and weights too

    def wake_up(self) -> None:
        self.speculator.wake_up()

    def verify(self, c: ScheduledChunk, rows: torch.Tensor, eos_token_ids) -> Verdict:
        """Which of c's proposals the target keeps, and its next token. rows: (1 + len(c.draft), vocab)."""
        r = c.request
        if r.guided is not None:
            r.guided.sync(r.output_token_ids)
        verdict = verify(rows, c.draft, lambda kept: row_for(r, eos_token_ids, kept))
        if r.guided is not None:
            r.guided.sync(r.output_token_ids)  # back to the output: emitting accepts the kept tokens again
        return verdict

    def stats(self) -> SpecCounts:
        return self.speculator.totals_snapshot()
