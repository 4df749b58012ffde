"""What one step runs (the scheduler's output): each sequence's chunk of tokens, and what must happen
before the step (block copies, KV imports) or instead of it (failed and preempted sequences)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.runtime.request import Request


@dataclass
class ScheduledChunk:
    request: Request
    start: int  # first token position computed this step (the request's num_computed_tokens)
    num_new_tokens: int  # tokens computed this step: positions [start, start + num_new_tokens)
    # proposed tokens (speculative decoding) after the sequence's last token; they are the chunk's tail,
    # counted in num_new_tokens, and each of the last 1 + len(draft) rows picks or verifies a token
    draft: list[int] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + self.num_new_tokens

    @property
    def token_ids(self) -> list[int]:
        """The tokens this chunk computes (a speculating row's proposals included)."""
        return self.request.all_token_ids[self.start : self.end] + self.draft

    @property
    def samples(self) -> bool:
        """The chunk reaches the sequence's last token, so its last row's logits pick the next token."""
        return self.end == self.request.num_tokens + len(self.draft)

    @property
    def prompt_logprob_positions(self) -> range:
        """Positions p whose logits score prompt token p + 1 (empty unless prompt logprobs are wanted)."""
        r = self.request
        if not r.wants_prompt_logprobs:
            return range(0)
        return range(self.start, min(self.end, r.num_prompt_tokens - 1))

    @property
    def completes_prompt(self) -> bool:
        return self.start < self.request.num_prompt_tokens <= self.end


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    block_copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) KV blocks to copy first
    failed: list[tuple[Request, Exception]] = field(default_factory=list)  # finished: their adapter would not load
    kv_imports: list[Request] = field(default_factory=list)  # admitted with their prompt's KV to write first

    @property
    def num_tokens(self) -> int:
        return sum(c.num_new_tokens for c in self.chunks)
