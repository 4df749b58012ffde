"""The typed messages that cross the engine interface (see protocol.py).

Identity is typed (engine/ids.py): an engine request is named by a `RequestId`, one of its n
sequences by a `SequenceId`; whatever id a client sent travels in `RequestOptions.client_id`, for
logs and echoing only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.kv_transfer import KVHandle
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams, TokenLogprob
from trtserve.engine.stats import SpecCounts
from trtserve.engine.timeline import Timeline


@dataclass(eq=False)
class GenerateRequest:
    """What an engine runs: a prompt, its sampling params and its options (engine/request_options.py)."""

    prompt_token_ids: list[int]
    params: SamplingParams
    options: RequestOptions = field(default_factory=RequestOptions)
    request_id: RequestId = field(default_factory=RequestId.new)


@dataclass
class TokenDelta:
    """New output of one sequence (index) of a request since its previous delta."""

    request_id: RequestId
    index: int = 0  # which of the request's n sequences
    token_ids: list[int] = field(default_factory=list)  # new tokens
    logprobs: list[TokenLogprob] | None = None  # one per new token, when asked for
    prompt_logprobs: list[TokenLogprob | None] | None = None  # first delta only; None for token 0
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | None = None  # the stop token id that ended it
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    num_preemptions: int = 0  # times this sequence was preempted (its KV recomputed) so far
    queue_time: float | None = None  # seconds from arrival to first scheduling (first delta only)
    error: str | None = None
    spec: SpecCounts | None = None  # speculative decoding's counts for this sequence so far (when it speculated)
    kv_handle: KVHandle | None = None  # the held prompt KV of a finished KVHold request (its last delta)
    # a pooling request's output (its only delta, which emits no token): the vector or the head's logits
    pooled: list[float] | None = None
    timeline: Timeline | None = None  # a traced sequence's timed engine work (RequestOptions.trace), last delta only

    @property
    def sequence(self) -> SequenceId:
        return SequenceId(self.request_id, self.index)
