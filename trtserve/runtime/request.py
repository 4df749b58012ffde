"""A request's state inside the torch engine. The scheduler and engine core own it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from trtserve.runtime.sampling_params import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    request_id: str  # unique in the engine; a forked sequence is "<parent>#<index>"
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival: int  # admission order (monotonic counter), for FCFS
    priority: float = 0.0  # higher is served first
    cache_salt: str | None = None
    index: int = 0  # which of the n sequences of its prompt
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache at first admission
    num_preemptions: int = 0
    status: Status = Status.WAITING
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | None = None  # the stop token id that ended it
    generator: torch.Generator | None = None
    forked: bool = False  # n > 1 children have been created
    prompt_logprobs_done: bool = False
    arrival_time: float = 0.0  # time.monotonic() when added
    scheduled_time: float | None = None  # time.monotonic() when first admitted to the batch

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
