"""Step timings of traced requests (`RequestOptions.trace`, engine/timeline.py): each prefill chunk and
each verification of their proposals, on the sequence's `timeline` (the grammar queue times its compile).

While no traced request is in the engine a step reads no clock and walks no chunk, so tracing off costs a
counter check per hook.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from trtserve.engine.timeline import PrefillChunk, Timeline, Verification
from trtserve.runtime.features import EngineFeature

if TYPE_CHECKING:
    from trtserve.runtime.request import Request
    from trtserve.runtime.schedule import SchedulerOutput


class StepTimeline(EngineFeature):
    def __init__(self):
        self.traced = 0  # traced requests in the engine
        self._began = 0.0  # time.monotonic() when this step's model run began (while any is traced)

    def on_add(self, r: Request) -> None:
        if r.options.trace:
            r.timeline = Timeline()
            self.traced += 1

    def on_request_done(self, r: Request) -> None:
        if r.options.trace:
            self.traced -= 1

    def before_run(self, out, kv, blocks) -> None:
        if self.traced:
            self._began = time.monotonic()

    def after_run(self, out: SchedulerOutput) -> None:
        if not self.traced:
            return
        now = time.monotonic()
        for c in out.chunks:
            r, t = c.request, c.request.timeline
            if t is None or c.start >= r.num_prompt_tokens:
                continue
            # a chunk that does not continue the previous one starts after the cached prefix (first or recomputed)
            continues = bool(t.prefill_chunks) and t.prefill_chunks[-1].start + t.prefill_chunks[-1].tokens == c.start
            tokens = min(c.end, r.num_prompt_tokens) - c.start
            t.prefill_chunks.append(PrefillChunk(self._began, now, c.start, tokens, 0 if continues else c.start))

    def on_verified(self, r: Request, proposed: int, accepted: int) -> None:
        if r.timeline is not None:
            r.timeline.verifications.append(Verification(self._began, time.monotonic(), proposed, accepted))
