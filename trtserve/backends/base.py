"""The engine interface every backend implements, and the typed messages that cross it.

    Engine: generate(request) -> async iterator of TokenDelta; abort(request_id); stats(); health()

Everything above it (tokenizing, chat templates, detokenization, stop strings, admission,
timeouts, metrics, HTTP) is shared by the torch and TensorRT-LLM backends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from trtserve.runtime.sampler import TokenLogprob
from trtserve.runtime.sampling_params import SamplingParams


@dataclass
class GenerateRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: float = 0.0  # higher is served first
    cache_salt: str | None = None  # isolates this request's prefix-cache entries


@dataclass
class TokenDelta:
    """New output of one sequence (index) of a request since its previous delta."""

    request_id: str
    index: int = 0  # which of the request's n sequences
    token_ids: list[int] = field(default_factory=list)  # new tokens
    logprobs: list[TokenLogprob] | None = None  # one per new token, when asked for
    prompt_logprobs: list[TokenLogprob | None] | None = None  # first delta only; None for token 0
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | None = None  # the stop token id that ended it
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    queue_time: float | None = None  # seconds from arrival to first scheduling (first delta only)
    error: str | None = None


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


class Engine(Protocol):
    max_seq_len: int  # prompt + output limit the engine was built for

    def check(self, request: GenerateRequest) -> None:
        """Raise UserError if the request can never run on this engine (e.g. too long)."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]: ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    def health(self) -> bool: ...
