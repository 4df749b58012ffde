"""In-flight batching: each step, a batch under a token budget and a sequence budget.

Count tokens, not phases: a request advances `num_computed_tokens` towards `num_tokens`. Running
requests go first (one decode token each, or their next prefill chunk), then waiting requests
are admitted with whatever budget is left, chunking their prompts if it is short. Capacity
policies follow TensorRT-LLM:

- guaranteed_no_evict: admit only when the request's worst case (prompt + max_tokens, times n)
  fits beside the worst cases of everything running, so no request is ever preempted;
- max_utilization: admit when the next chunk fits; when blocks run out, preempt the newest
  request (free its blocks, recompute it later).

With LoRA adapters, a running request holds its adapter in the adapter cache (adapter_cache.py), which
lets at most max_loras adapters be active: a waiting request whose adapter cannot be activated is
passed over (the requests behind it may run) until a running one releases a slot.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from trtserve.engine.run_config import CapacityPolicy
from trtserve.engine.stats import SchedulerStats
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.features.lora import NoLora
from trtserve.runtime.features.pooling import NoPooling
from trtserve.runtime.features.speculation import NoSpeculation
from trtserve.runtime.features.vision import NoVision
from trtserve.runtime.request import Request, Status
from trtserve.runtime.schedule import ScheduledChunk, SchedulerOutput


@dataclass
class SchedulerConfig:
    max_num_tokens: int  # tokens one step may compute
    max_batch_size: int  # sequences one step may hold
    max_seq_len: int
    policy: CapacityPolicy = "guaranteed_no_evict"


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        blocks: BlockManager,
        lora: NoLora | None = None,
        speculation: NoSpeculation | None = None,
        pooling: NoPooling | None = None,
        vision: NoVision | None = None,
    ):
        self.config = config
        self.blocks = blocks
        self.lora = lora or NoLora()  # which adapters may be active (features/lora.py)
        self.speculation = speculation or NoSpeculation()  # who speculates, with which proposals
        self.pooling = pooling or NoPooling()  # which requests pool every prompt position (features/pooling.py)
        self.vision = vision or NoVision()  # where a chunk may not end: inside an image attended both ways
        self.vision.check_budget(config.max_num_tokens)
        self.waiting: list[Request] = []  # ordered: higher priority first, then arrival
        self.running: list[Request] = []  # admission order
        self.num_preemptions = 0
        self._copies: list[tuple[int, int]] = []  # KV block copies owed to forked sequences, for the next step

    # ---- membership ----------------------------------------------------------------------
    def add(self, request: Request) -> None:
        request.status = Status.WAITING
        key = self._order(request)
        i = next((i for i, r in enumerate(self.waiting) if self._order(r) > key), len(self.waiting))
        self.waiting.insert(i, request)

    def fork(self, parent: Request, child: Request) -> None:
        """Sequence `child` joins the batch sharing the parent's computed tokens: full blocks are
        shared, the partial last one is copied before the next step runs."""
        parent.forked = True
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        self._copies += self.blocks.fork(parent.seq, child.seq, parent.num_computed_tokens)
        held = self.lora.acquire(child)
        assert held, "a forked child's adapter is its parent's, which is active"
        child.status = Status.RUNNING
        self.running.append(child)

    def finish(self, request: Request, reason: str, keep_blocks: bool = False) -> None:
        """Remove a request wherever it is and free its blocks (keep_blocks: a held prefill's, features/handoff.py)."""
        if request in self.running:
            self.running.remove(request)
            self.lora.release(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        if not keep_blocks:
            self.blocks.free(request.seq)
        self.speculation.forget(request)
        request.status = Status.FINISHED
        request.finish_reason = request.finish_reason or reason

    def carry_over(self, old: Scheduler) -> None:
        """Take over a replaced scheduler's counters (the KV cache was remade between requests)."""
        self.num_preemptions = old.num_preemptions

    def stats(self, **counts: int) -> SchedulerStats:
        """counts: the engine core's steps, prompt_tokens and generated_tokens."""
        return SchedulerStats(len(self.running), len(self.waiting), self.num_preemptions, **counts)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    @staticmethod
    def _order(r: Request) -> tuple[float, int, int]:
        return (-r.options.priority, r.arrival, r.index)

    # ---- the step ------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(block_copies=self._copies)
        self._copies = []
        budget = self.config.max_num_tokens
        self.speculation.plan(self.running, len(self.waiting))
        for req in list(self.running):
            if req not in self.running:  # preempted by an earlier request this step
                continue
            n = self.vision.chunk_tokens(
                req, req.num_computed_tokens, min(req.num_tokens - req.num_computed_tokens, budget)
            )
            if n <= 0:
                continue
            draft = self._draft(req, budget) if n == 1 else []
            if draft and not self.blocks.append_slots(req.seq, req.num_computed_tokens + n + len(draft)):
                draft = []  # no room for the proposals: a plain row, preempting nobody for them
            while not self.blocks.append_slots(req.seq, req.num_computed_tokens + n):
                victim = self._newest_running()
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                out.chunks.append(ScheduledChunk(req, req.num_computed_tokens, n + len(draft), draft))
                budget -= n + len(draft)
        if not out.preempted:
            self._admit(out, budget)
        return out

    def _draft(self, req: Request, budget: int) -> list[int]:
        """Proposals for a decoding request: within the step's budget, its max_tokens and max_seq_len
        (the step emits up to 1 + len(draft) tokens)."""
        if req.params.n > 1 and not req.forked:
            return []  # its first token forks it (engine core), which a verification step does not do
        left = min(
            budget - 1,
            req.params.max_tokens - len(req.output_token_ids) - 1,
            self.config.max_seq_len - req.num_tokens - 1,
        )
        return self.speculation.draft(req, left)

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        i = 0
        while i < len(self.waiting) and budget > 0:
            req = self.waiting[i]
            if len(self.running) + self._num_seqs(req) > self.config.max_batch_size:
                return
            if not self.lora.can_run(req):
                i += 1  # max_loras other adapters are active: it waits, the requests behind it may run
                continue
            # Prompt logprobs (and mean pooling) need every prompt position computed: no prefix cache.
            skip_cache = req.wants_prompt_logprobs or req.kv_import is not None or self.pooling.every_position(req)
            cached = [] if skip_cache else self.blocks.lookup_prefix(req.all_token_ids, req.prefix_scope)
            num_cached = len(cached) * self.blocks.block_size
            if req.kv_import is not None:  # a disaggregated decode: its prompt's KV comes with it
                num_cached = req.kv_import.payload.num_tokens
            n = self.vision.chunk_tokens(req, num_cached, min(req.num_tokens - num_cached, budget))
            if n <= 0:
                return  # its next image does not fit what is left of this step
            if self._waits_whole(req, num_cached, n):
                return
            no_evict = self.config.policy == "guaranteed_no_evict"
            if no_evict and self._worst_case(req) - len(cached) > self.blocks.num_free_blocks - self._reserved():
                return
            if not self._acquire_adapter(req, out):
                continue  # failed and finished: the next request is at index i now
            if not self.blocks.allocate(req.seq, cached, num_cached + n, req.prefix_scope):
                self.lora.release(req)
                return  # FCFS: nothing behind the head of the queue jumps it
            self.waiting.pop(i)
            if req.num_computed_tokens == 0 and not req.output_token_ids:
                req.num_cached_tokens = num_cached
            req.num_computed_tokens = num_cached
            req.scheduled_time = req.scheduled_time or time.monotonic()
            req.status = Status.RUNNING
            self.running.append(req)
            out.chunks.append(ScheduledChunk(req, num_cached, n))
            if req.kv_import is not None:
                out.kv_imports.append(req)
            budget -= n

    def _waits_whole(self, req: Request, num_cached: int, n: int) -> bool:
        """A pooling prompt that a whole step holds is never cut in two: it waits for the next step rather
        than run a chunk now and its rest as a second chunk after cached keys (the masked attention path)."""
        left = req.num_tokens - num_cached
        return self.pooling.pools(req) and n < left <= self.config.max_num_tokens

    def update(self, out: SchedulerOutput) -> int:
        """After the step ran: each chunk's tokens are in the KV cache. Registers the blocks that
        became full for prefix reuse; returns how many prompt tokens were computed."""
        prompt_tokens = 0
        for c in out.chunks:
            r = c.request
            prompt_tokens += max(min(c.end, r.num_prompt_tokens) - c.start, 0)
            r.num_computed_tokens = c.end - len(c.draft)  # proposals count once verified (`settle`)
            self.blocks.commit(r.seq, r.all_token_ids, r.num_computed_tokens)
        return prompt_tokens

    def settle(self, r: Request, accepted: list[int]) -> None:
        """After verifying a speculating row: the proposals in `accepted` (a prefix of its draft, not yet
        in the output) keep their K/V; the rejected ones' slots are released."""
        r.num_computed_tokens += len(accepted)
        self.blocks.truncate(r.seq, r.num_computed_tokens)
        self.blocks.commit(r.seq, r.all_token_ids + accepted, r.num_computed_tokens)

    def _acquire_adapter(self, req: Request, out: SchedulerOutput) -> bool:
        """Hold the request's adapter (loading it if evicted); a load that fails finishes the request."""
        try:
            return self.lora.acquire(req)
        except Exception as err:  # its files went away or changed: this request fails, not the engine
            self.finish(req, "error")
            out.failed.append((req, err))
            return False

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
            table = len(self.blocks.block_table(r.seq))
            held += max(self._worst_case(r) - table, 0)
        return held

    def _newest_running(self) -> Request:
        return max(self.running, key=self._order)

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.running.remove(req)
        self.lora.release(req)
        self.blocks.free(req.seq)
        self.speculation.forget(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        out.preempted.append(req)
        out.chunks = [c for c in out.chunks if c.request is not req]
        self.add(req)
