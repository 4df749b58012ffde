"""In-flight batching: each step, a batch under a token budget and a sequence budget.

Count tokens, not phases: a request advances `num_computed_tokens` towards `num_tokens`. Running
requests go first (one decode token each, or their next prefill chunk), then waiting requests
are admitted with whatever budget is left, chunking their prompts if it is short. Capacity
policies follow TensorRT-LLM:

- guaranteed_no_evict: admit only when the request's worst case (prompt + max_tokens, times n)
  fits beside the worst cases of everything running, so no request is ever preempted;
- max_utilization: admit when the next chunk fits; when blocks run out, preempt the newest
  request (free its blocks, recompute it later).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.request import Request, Status

CapacityPolicy = Literal["guaranteed_no_evict", "max_utilization"]


@dataclass
class SchedulerConfig:
    max_num_tokens: int  # tokens one step may compute
    max_batch_size: int  # sequences one step may hold
    max_seq_len: int
    policy: CapacityPolicy = "guaranteed_no_evict"


@dataclass
class ScheduledChunk:
    request: Request
    num_new_tokens: int  # tokens computed this step, from request.num_computed_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_new_tokens for c in self.chunks)


class Scheduler:
    def __init__(self, config: SchedulerConfig, blocks: BlockManager):
        self.config = config
        self.blocks = blocks
        self.waiting: list[Request] = []  # ordered: higher priority first, then arrival
        self.running: list[Request] = []  # admission order
        self.num_preemptions = 0

    # ---- membership ----------------------------------------------------------------------
    def add(self, request: Request) -> None:
        request.status = Status.WAITING
        key = self._order(request)
        i = next((i for i, r in enumerate(self.waiting) if self._order(r) > key), len(self.waiting))
        self.waiting.insert(i, request)

    def add_running(self, request: Request) -> None:
        """A forked sequence joins the batch with blocks already allocated."""
        request.status = Status.RUNNING
        self.running.append(request)

    def finish(self, request: Request, reason: str) -> None:
        """Remove a request wherever it is and free its blocks."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.blocks.free(request.request_id)
        request.status = Status.FINISHED
        request.finish_reason = request.finish_reason or reason

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    @staticmethod
    def _order(r: Request) -> tuple[float, int, int]:
        return (-r.priority, r.arrival, r.index)

    # ---- the step ------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_tokens
        for req in list(self.running):
            if req not in self.running:  # preempted by an earlier request this step
                continue
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            while not self.blocks.append_slots(req.request_id, req.num_computed_tokens + n):
                victim = self._newest_running()
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                out.chunks.append(ScheduledChunk(req, n))
                budget -= n
        if not out.preempted:
            self._admit(out, budget)
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0:
            req = self.waiting[0]
            if len(self.running) + self._num_seqs(req) > self.config.max_batch_size:
                return
            # Prompt logprobs need every prompt position computed, so they bypass the prefix cache.
            wants_all = req.params.prompt_logprobs is not None and not req.prompt_logprobs_done
            cached = [] if wants_all else self.blocks.lookup_prefix(req.all_token_ids, req.cache_salt)
            num_cached = len(cached) * self.blocks.block_size
            n = min(req.num_tokens - num_cached, budget)
            no_evict = self.config.policy == "guaranteed_no_evict"
            if no_evict and self._worst_case(req) - len(cached) > self.blocks.num_free_blocks - self._reserved():
                return
            if not self.blocks.allocate(req.request_id, cached, num_cached + n, req.cache_salt):
                return  # FCFS: nothing behind the head of the queue jumps it
            self.waiting.pop(0)
            if req.num_computed_tokens == 0 and not req.output_token_ids:
                req.num_cached_tokens = num_cached
            req.num_computed_tokens = num_cached
            req.scheduled_time = req.scheduled_time or time.monotonic()
            req.status = Status.RUNNING
            self.running.append(req)
            out.chunks.append(ScheduledChunk(req, n))
            budget -= n

    def _worst_case(self, req: Request) -> int:
        """Blocks the request can ever hold: prompt + max_tokens, for each of its n sequences."""
        total = min(req.num_prompt_tokens + req.params.max_tokens, self.config.max_seq_len)
        return self._num_seqs(req) * self.blocks.blocks_for(total)

    @staticmethod
    def _num_seqs(req: Request) -> int:
        """Sequences the request will run as: n until it forks (forked children have n == 1)."""
        return 1 if req.forked else req.params.n

    def _reserved(self) -> int:
        """Blocks running requests may still claim under guaranteed_no_evict."""
        held = 0
        for r in self.running:
            table = len(self.blocks.block_table(r.request_id))
            held += max(self._worst_case(r) - table, 0)
        return held

    def _newest_running(self) -> Request:
        return max(self.running, key=lambda r: (-r.priority, r.arrival, r.index))

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.running.remove(req)
        self.blocks.free(req.request_id)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        out.preempted.append(req)
        out.chunks = [c for c in out.chunks if c.request is not req]
        self.add(req)
