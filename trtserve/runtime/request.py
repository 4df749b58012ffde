"""One sequence's state inside the torch engine.

Owners: the scheduler writes the scheduling state (status, num_computed_tokens, num_cached_tokens,
scheduled_time, forked); the engine core writes the output (output_token_ids, prompt_logprobs,
finish_reason via the scheduler's `finish`, the grammar matcher `guided`). Nothing else writes a Request.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.kv_transfer import KVImport
from trtserve.engine.messages import SequenceId
from trtserve.engine.sampling import SamplingParams, TokenLogprob
from trtserve.runtime.guided import GuidedState
from trtserve.runtime.prefix_scope import PrefixScope
from trtserve.runtime.speculative.state import SpecState


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    seq: SequenceId  # (engine request, index among its n sequences); the key of its KV blocks
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival: int  # admission order (monotonic counter), for FCFS
    priority: float = 0.0  # higher is served first
    cache_salt: str | None = None
    cache_namespace: str | None = None
    context_version: int | None = None
    adapter: AdapterRef | None = None  # the LoRA adapter it runs under; None: the base model
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache at first admission
    num_preemptions: int = 0
    status: Status = Status.WAITING
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | None = None  # the stop token id that ended it
    generator: torch.Generator | None = None
    forked: bool = False  # n > 1 children have been created
    prompt_logprobs: list[TokenLogprob | None] | None = None  # gathered chunk by chunk; None: not wanted or sent
    arrival_time: float = 0.0  # time.monotonic() when added
    scheduled_time: float | None = None  # time.monotonic() when first admitted to the batch
    guided: GuidedState | None = None  # grammar matcher of a constrained sequence (engine core writes it)
    speculate: bool = True  # False: the request opted out of speculative decoding
    spec: SpecState | None = None  # its speculative-decoding counts and switch-off (the speculator writes it)
    kv_hold: float | None = None  # seconds to hold its prompt's KV once finished (a disaggregated prefill)
    kv_import: KVImport | None = None  # its prompt's KV, written at admission (a disaggregated decode)

    @property
    def index(self) -> int:
        return self.seq.index

    @property
    def wants_prompt_logprobs(self) -> bool:
        """Prompt logprobs are still being gathered (they need every prompt position computed)."""
        return self.prompt_logprobs is not None

    @property
    def prefix_scope(self) -> PrefixScope:
        """What another request must share to reuse this one's cached blocks (besides the tokens)."""
        adapter = self.adapter.content_hash if self.adapter is not None else None
        return PrefixScope(self.cache_salt, self.cache_namespace, self.context_version, adapter)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def make_generator(self) -> None:
        if self.params.greedy:
            return
        g = torch.Generator()
        seed = self.params.seed
        # Seeds are taken modulo 2**64, torch's range; sequence i of n uses seed + i.
        g.manual_seed((seed + self.index) % 2**64 if seed is not None else int(torch.randint(0, 2**62, ()).item()))
        self.generator = g
