"""Pooling requests as an engine-core feature (engine/pooling.py, docs/pooling.md).

A pooling request (`RequestOptions.pooling`) is a prefill-only row of the same scheduler as generation:
its chunks run in the same steps, the runner hands this feature the final hidden states of the rows
it asks for (`rows`), and when the prompt is complete its one delta carries the head's output instead
of a token. Last-token pooling needs one row per request and may start from a cached prefix (a rerank's
shared query prefix); mean pooling needs every prompt position, so it bypasses the prefix cache as
prompt logprobs do (`every_position`). `NoPooling`, the engine without a head, refuses such requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trtserve.engine.errors import UserError
from trtserve.engine.ids import SequenceId
from trtserve.models.pooling import PoolingHead
from trtserve.runtime.features import EngineFeature

if TYPE_CHECKING:
    from trtserve.engine.messages import GenerateRequest
    from trtserve.runtime.request import Request
    from trtserve.runtime.schedule import ScheduledChunk


class NoPooling(EngineFeature):
    """An engine that generates: it has no pooling head."""

    def check(self, req: GenerateRequest) -> None:
        if req.options.pooling is not None:
            raise UserError(
                f"this engine generates text and has no pooling head, so it cannot serve {req.options.pooling!r} "
                "requests; build the model with `trtserve build MODEL --pooling TASK` (docs/pooling.md)"
            )

    @staticmethod
    def pools(r: Request) -> bool:
        return r.options.pooling is not None

    def every_position(self, r: Request) -> bool:
        return False

    def rows(self, c: ScheduledChunk) -> list[int]:
        """Offsets within the chunk whose final hidden states the request's pooling needs."""
        return []

    def take(self, c: ScheduledChunk, hidden: torch.Tensor) -> list[float] | None:
        raise AssertionError("no chunk asks for hidden states without a pooling head")


class Pooling(NoPooling):
    """A pooling engine: its head (models/pooling.py) applied to each request's pooled hidden state."""

    def __init__(self, head: PoolingHead):
        self.head = head
        self.config = head.config
        self._sums: dict[SequenceId, torch.Tensor] = {}  # mean pooling: (hidden,) float32 sums of the chunks so far

    def check(self, req: GenerateRequest) -> None:
        task, cfg = req.options.pooling, self.config
        if task is None and cfg.task != "rerank":  # a reranker is a causal LM; the others have no LM head
            raise UserError(f"this engine is {cfg.describe()}: it pools and does not generate text (docs/pooling.md)")
        if task is not None and task != cfg.task:
            raise UserError(f"this engine is {cfg.describe()}; it serves {cfg.task!r} requests, not {task!r}")
        if task is not None and req.params.n != 1:
            raise UserError("a pooling request has one output; leave n at 1")

    def every_position(self, r: Request) -> bool:
        return self.pools(r) and self.config.method == "mean"

    def rows(self, c: ScheduledChunk) -> list[int]:
        if not self.pools(c.request):
            return []
        if self.every_position(c.request):
            return list(range(c.num_new_tokens))
        return [c.num_new_tokens - 1] if c.samples else []

    def take(self, c: ScheduledChunk, hidden: torch.Tensor) -> list[float] | None:
        """Fold in a chunk's rows (hidden: (len(rows(c)), hidden)); the head's output once the prompt is done."""
        r = c.request
        if self.every_position(r):
            partial = self._sums.pop(r.seq, None) if c.start > 0 else None  # start 0: a first or preempted run
            total = hidden.float().sum(dim=0) + (0 if partial is None else partial)  # (hidden,)
            if not c.samples:
                self._sums[r.seq] = total
                return None
            return self.head.apply(total / r.num_prompt_tokens)
        return self.head.apply(hidden[-1])

    def on_request_done(self, r: Request) -> None:
        self._sums.pop(r.seq, None)  # finished or aborted mid-prompt
