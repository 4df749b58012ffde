"""The typed messages that cross the engine interface (see protocol.py).

Identity is typed: an engine request is named by a `RequestId` that the contract generates
(never parsed from, nor equal to, anything a client sent), and one of its n sequences by a
`SequenceId`. Whatever id a client sent travels as `client_id`, for logs and echoing only: two
requests may carry the same client id, or any characters in it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.kv_transfer import KVHandle, KVTransfer
from trtserve.engine.sampling import SamplingParams, TokenLogprob

_next_id = itertools.count(1)


@dataclass(frozen=True, slots=True)
class RequestId:
    """One engine request, unique in this process. Create with `RequestId.new()`."""

    value: int

    @classmethod
    def new(cls) -> RequestId:
        return cls(next(_next_id))  # itertools.count is atomic under the GIL

    def __str__(self) -> str:
        return f"req-{self.value}"


@dataclass(frozen=True, slots=True)
class SequenceId:
    """Sequence `index` (0 <= index < n) of a request."""

    request: RequestId
    index: int = 0

    def __str__(self) -> str:
        return f"{self.request}/{self.index}"


@dataclass
class GenerateRequest:
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: float = 0.0  # higher is served first
    cache_salt: str | None = None  # isolates this request's prefix-cache entries
    cache_namespace: str | None = None  # a named context whose cached prefixes can be invalidated together
    context_version: int | None = None  # that context's version: prefixes cached under another are not reused
    client_id: str | None = None  # what the client called it (logs only; never a key)
    adapter: AdapterRef | None = None  # the LoRA adapter it runs under (engine/adapters.py); None: the base model
    speculate: bool = True  # False: never speculate for this request (the `speculative` option's opt-out)
    # disaggregation (engine/kv_transfer.py): KVHold keeps a prefill's prompt KV; KVImport starts from one
    kv_transfer: KVTransfer | None = None
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

    @property
    def sequence(self) -> SequenceId:
        return SequenceId(self.request_id, self.index)


@dataclass
class EngineStats:
    running: int  # sequences in the batch
    waiting: int  # requests queued
    kv_blocks_total: int
    kv_blocks_used: int
    kv_blocks_free: int
    kv_blocks_cached: int
    kv_utilization: float  # used / total
    kv_waste: float  # allocated-but-unfilled slots / allocated slots
    prefix_queries: int  # prompt tokens looked up
    prefix_hits: int  # prompt tokens found cached
    preemptions: int
    prompt_tokens: int  # prompt tokens computed (not cached)
    generated_tokens: int
    steps: int
    cache_invalidations: int = 0  # Engine.invalidate_cache calls
    prefix_version_refusals: int = 0  # lookups whose prefix was cached only under another context_version
    prefix_by_namespace: dict[str, tuple[int, int]] = field(default_factory=dict)  # namespace -> (hit, missed) tokens
    # seconds the engine spent executing steps since it started (rate() of it: the busy fraction);
    # None where the backend cannot measure it truthfully
    busy_seconds: float | None = None
    # LoRA adapter cache: adapters loaded into memory (at start, at run time, or again after an
    # eviction), evicted (LRU, over max_cpu_loras), and found in memory when a request wanted one
    spec: SpecCounts = field(default_factory=lambda: SpecCounts())  # speculative decoding, all sequences
    adapter_loads: int = 0
    adapter_evictions: int = 0
    adapter_hits: int = 0
    by_adapter: dict[str, AdapterCounts] = field(default_factory=dict)  # adapter name -> its requests' counts
    # The second KV tier (the `kv_offload` option): prompt tokens its restores served (part of
    # prefix_hits), blocks spilled into it, restored from it and refused (a failed checksum), and the
    # bytes of blocks it holds and may hold
    kv_offload_hit_tokens: int = 0
    kv_offload_spills: int = 0
    kv_offload_restores: int = 0
    kv_offload_refusals: int = 0
    kv_offload_bytes: int = 0
    kv_offload_capacity_bytes: int = 0
    kv_block_bytes: int = 0  # bytes of one KV block (K and V, every layer); 0 where unknown
    # seconds each start-up phase took (e.g. "weights", "kv_cache"), measured by the engine
    startup_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AdapterCounts:
    """What the requests of one LoRA adapter (by name) asked of the engine since it started."""

    requests: int = 0  # requests submitted under it
    prompt_tokens: int = 0  # prompt tokens computed (prefix-cache hits excluded)
    generated_tokens: int = 0


@dataclass
class SpecCounts:
    """Speculative decoding's counts, with vLLM's definitions: acceptance rate = accepted_tokens /
    draft_tokens; mean acceptance length = 1 + accepted_tokens / drafts."""

    drafts: int = 0  # verification passes that carried proposals
    draft_tokens: int = 0  # tokens proposed
    accepted_tokens: int = 0  # proposed tokens the target model kept
    accepted_per_position: list[int] = field(default_factory=list)  # [i]: drafts whose i-th proposal was kept
