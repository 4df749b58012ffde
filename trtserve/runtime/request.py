"""One sequence's state inside the torch engine.

Owners: the scheduler writes the scheduling state (status, num_computed_tokens, num_cached_tokens,
scheduled_time, forked); the engine core writes the output (output_token_ids, prompt_logprobs,
finish_reason via the scheduler's `finish`, the grammar matcher `guided`); a feature writes its own
state (spec: speculation; kv_import: the KV hand-off; timeline: a traced request's step timings).
`options` is the front end's, read-only.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import torch

from trtserve.engine.ids import SequenceId
from trtserve.engine.kv_transfer import KVImport
from trtserve.engine.messages import TokenDelta
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams, TokenLogprob
from trtserve.engine.timeline import Timeline
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
    # the request's options as its front end made them (engine/request_options.py), never copied field by field
    options: RequestOptions = field(default_factory=RequestOptions)
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
    spec: SpecState | None = None  # its speculative-decoding counts and switch-off (the speculator writes it)
    kv_import: KVImport | None = None  # its prompt's KV, until written at admission (a disaggregated decode)
    timeline: Timeline | None = None  # its timed engine work while traced (features/timeline.py writes it)
    rope_long: bool = (
        False  # its prompt runs on LongRoPE's long factors: its blocks are keyed apart (features/long_rope.py)
    )

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
        o = self.options
        adapter = o.adapter.content_hash if o.adapter is not None else None
        salt = f"{o.cache_salt or ''}\x00long-rope" if self.rope_long else o.cache_salt
        images = tuple(img.content_hash for img in o.images)  # its images' content (features/vision.py)
        return PrefixScope(salt, o.cache_namespace, o.context_version, adapter, images)

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

    def delta(self, tokens: list[int], lps, prompt_lps=None) -> TokenDelta:
        """Its delta for `tokens`, just appended to its output (lps: their logprobs, when asked for)."""
        first = len(self.output_token_ids) == len(tokens)
        queued = (self.scheduled_time or time.monotonic()) - self.arrival_time if first else None
        return TokenDelta(
            request_id=self.seq.request,
            index=self.index,
            token_ids=tokens,
            logprobs=lps,
            prompt_logprobs=prompt_lps,
            finish_reason=self.finish_reason if self.is_finished else None,
            stop_reason=self.stop_reason,
            num_prompt_tokens=self.num_prompt_tokens,
            num_cached_tokens=self.num_cached_tokens,
            num_preemptions=self.num_preemptions,
            queue_time=queued,
            spec=self.spec.snapshot() if self.spec is not None and self.spec.counts.drafts else None,
            timeline=self.timeline if self.is_finished else None,
        )
