"""Triton's dynamic batcher as pure logic: priority queues with their queue policies, and the batch
forming rule of Triton core's DynamicBatchScheduler::GetDynamicBatch, over plain values and an
injected clock (seconds). BatchedModel (trtserve/tensor/batched.py) drives it from its worker
threads under one lock; nothing here blocks, sleeps or reads the time.

Queue order is level 1 (highest) first; within a level, arrival order, then the requests that
timed out with timeout_action DELAY (Triton's per-level delayed queue). A batch is always a prefix
of that order: it ends at the first request whose batch-key differs from its head's (non-batch
shapes), or that would take it past max_batch_size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from trtserve.tensor.types import DynamicBatching, QueueFull


@dataclass(eq=False)
class Pending:
    """One queued request. Compared by identity."""

    item: Any  # the caller's payload (BatchedModel's job)
    size: int  # batch elements it brings (1 for a model that does not batch)
    key: Hashable  # requests share a batch only when their keys are equal (non-batch shapes)
    arrival: float  # seconds on the batcher's clock
    level: int  # priority level it is queued at (0 when the model has no levels)
    deadline: float | None = None  # queue timeout on the same clock; None: waits as long as it takes


@dataclass
class Decision:
    """What a free instance should do now."""

    batch: list[Pending] = field(default_factory=list)  # run these now (queue order); empty: nothing yet
    rejected: list[Pending] = field(default_factory=list)  # timed out with REJECT: fail with QueueTimeout
    wait: float | None = None  # seconds until asking again is useful; None: until something is enqueued


@dataclass
class _Level:
    queue: deque[Pending] = field(default_factory=deque)  # arrival order, not timed out
    delayed: deque[Pending] = field(default_factory=deque)  # timed out with DELAY, in timeout order

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


class Batcher:
    """The queue of one model. `batching=None` (no dynamic_batching in config.pbtxt): one FIFO queue,
    every request its own batch, no queue policy. `max_batch_size` 0: the model does not batch, so
    every request is its own batch too (its queue policy and priorities still apply)."""

    def __init__(self, max_batch_size: int, batching: DynamicBatching | None):
        self.batching = batching
        self.max_batch_size = max_batch_size
        self.preferred = frozenset(batching.preferred_batch_size) if batching else frozenset()
        # Triton: the batch stops growing at the largest preferred size, else at max_batch_size.
        self.max_preferred = max(self.preferred) if self.preferred else max_batch_size
        self.delay = batching.max_queue_delay_us / 1e6 if batching else 0.0
        self.levels: dict[int, _Level] = {}

    def level_of(self, priority: int) -> int:
        """Triton's InferenceRequest::SetPriority: 0 or past the last level -> the default level."""
        b = self.batching
        if b is None or b.priority_levels == 0:
            return 0
        return b.default_priority_level if priority == 0 or priority > b.priority_levels else priority

    def timeout_of(self, level: int, timeout_us: int | None) -> int:
        """The queue timeout in microseconds (0: none). Triton's PolicyQueue::Enqueue: a request's
        own timeout counts only with allow_timeout_override, and only when it is shorter than a
        non-zero default."""
        if self.batching is None:
            return 0
        policy = self.batching.policy(level)
        timeout = policy.default_timeout_us
        if policy.allow_timeout_override and timeout_us and timeout_us < timeout:
            timeout = timeout_us
        return timeout

    def enqueue(
        self, item: Any, size: int, key: Hashable, now: float, priority: int = 0, timeout_us: int | None = None
    ) -> Pending:
        """Queue a request; QueueFull at once when its level's queue holds max_queue_size requests."""
        level = self.level_of(priority)
        lv = self.levels.setdefault(level, _Level())
        if self.batching is not None:
            limit = self.batching.policy(level).max_queue_size
            if limit and len(lv) >= limit:
                where = f" at priority level {level}" if level else ""
                raise QueueFull(f"Exceeds maximum queue size: {limit} requests are already queued{where}; retry later")
        timeout = self.timeout_of(level, timeout_us)
        p = Pending(item, size, key, now, level, now + timeout / 1e6 if timeout else None)
        lv.queue.append(p)
        return p

    def remove(self, p: Pending) -> bool:
        """Take a request out of the queue (its client went away); False when it is not queued."""
        lv = self.levels.get(p.level)
        for q in (lv.queue, lv.delayed) if lv else ():
            if p in q:
                q.remove(p)
                return True
        return False

    def drain(self) -> list[Pending]:
        """Empty the queue (shutdown), in queue order."""
        out = list(self._ordered())
        self.levels.clear()
        return out

    def __len__(self) -> int:
        return sum(len(lv) for lv in self.levels.values())

    def expire(self, now: float) -> list[Pending]:
        """Apply the queue policies: requests past their deadline leave the queue (REJECT; returned)
        or move behind their level's requests that have not timed out (DELAY)."""
        rejected: list[Pending] = []
        for level, lv in self.levels.items():
            late = [p for p in lv.queue if p.deadline is not None and now > p.deadline]
            if not late:
                continue
            delay = self.batching is not None and self.batching.policy(level).timeout_action == "DELAY"
            for p in late:
                lv.queue.remove(p)
                p.deadline = None  # Triton's delayed queue keeps no timeout
                (lv.delayed.append if delay else rejected.append)(p)
        return rejected

    def next_batch(self, now: float) -> Decision:
        """The batch a free instance runs now, or how long to wait before asking again."""
        rejected = self.expire(now)
        ordered = list(self._ordered())
        if not ordered:
            return Decision(rejected=rejected)
        if self.batching is None or self.max_batch_size == 0:
            return Decision(self._take(ordered[:1]), rejected)

        # Triton core, DynamicBatchScheduler::GetDynamicBatch (with no payload already scheduled).
        pending = 0  # batch elements in the pending batch: ordered[:n]
        n = 0
        best = 0  # the preferred-size batch found, in requests (0: none)
        send_now = False
        for p in ordered:
            if n:
                if pending + p.size > self.max_preferred and not best:
                    best = n  # growing would overshoot every preferred size: keep what is there
                if pending + p.size > self.max_batch_size or p.key != ordered[0].key:
                    send_now = True
                    break
            pending += p.size
            n += 1
            if pending in self.preferred:
                best = n
        oldest = min(p.arrival for p in ordered[:n])
        delay_exceeded = self.delay > 0 and now - oldest >= self.delay
        if best and not delay_exceeded:
            return Decision(self._take(ordered[:best]), rejected)
        if send_now or pending >= self.max_preferred or delay_exceeded or self.delay == 0:
            return Decision(self._take(ordered[:n]), rejected)
        wait = self.delay - (now - oldest)
        deadlines = [p.deadline for p in ordered if p.deadline is not None]
        if deadlines:
            wait = max(0.0, min(wait, min(deadlines) - now))
        return Decision(rejected=rejected, wait=wait)

    def _ordered(self) -> Iterator[Pending]:
        for level in sorted(self.levels):
            yield from self.levels[level].queue
            yield from self.levels[level].delayed

    def _take(self, batch: list[Pending]) -> list[Pending]:
        for p in batch:
            self.remove(p)
        return batch
