"""A reasoning model's thinking budget, enforced by the engine (SGLang's and vLLM's hard budget): once a
sequence has spent `budget` tokens inside its thinking, its next tokens are the close tag's, forced
by the sampler's mask, and the answer follows. The request carries its `ThinkingSpan`
(engine/thinking.py); whether a token is forced is a pure function of the output (plus the
proposals being verified), so speculative decoding, preemption (output kept, KV recomputed) and
prefix reuse give exactly the same tokens."""

from __future__ import annotations

from collections.abc import Sequence

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.request import Request


class ThinkingBudget(EngineFeature):
    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def check(self, req: GenerateRequest) -> None:
        span = req.options.thinking_span
        if span is None:
            return
        bad = [t for t in (*span.open_ids, *span.close_ids) if not 0 <= t < self.vocab_size]
        if bad:
            raise UserError(
                f"the thinking tags' token ids {bad} lie outside the model's vocabulary of {self.vocab_size}"
            )


def forced_token(r: Request, output: Sequence[int]) -> int | None:
    """The token sequence r must emit after `output` (its output, plus any proposals): the close tag's
    next token once its thinking budget is spent; None: free."""
    span = r.options.thinking_span
    return span.forced(output) if span is not None else None
