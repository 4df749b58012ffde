"""Triton's statistics extension for one model version: counts and cumulative durations.

`inference_count` counts batch elements and `execution_count` model executions, so dynamic
batching shows as execution_count < inference_count; `batch_stats` holds one entry per batch size
executed. Updated from the model's worker threads, read by scrapes and the stats routes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


@dataclass
class Duration:
    count: int = 0
    ns: int = 0  # nanoseconds, summed over `count` events

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += max(0, int(seconds * 1e9))

    def to_json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


@dataclass
class BatchStat:
    """The executions of one batch size."""

    batch_size: int
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStatistics:
    success: Duration = field(default_factory=Duration)  # whole request, arrival -> outputs, for those that succeeded
    fail: Duration = field(default_factory=Duration)  # whole request, for refusals, timeouts and model errors
    queue: Duration = field(default_factory=Duration)  # arrival -> its batch starts executing
    compute_input: Duration = field(default_factory=Duration)  # gathering the batch's inputs
    compute_infer: Duration = field(default_factory=Duration)  # the model's execution
    compute_output: Duration = field(default_factory=Duration)  # splitting the outputs per request
    inference_count: int = 0  # successful batch elements
    execution_count: int = 0  # executions of the model (one per batch)
    last_inference_ms: int = 0  # ms since the epoch when the last request ended; 0 before any
    batch_stats: dict[int, BatchStat] = field(default_factory=dict)  # batch size -> its executions
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def request(self, ok: bool, total: float, queue: float | None, elements: int) -> None:
        """One request ended after `total` seconds, `queue` of them queued (None: never executed);
        `elements`: its batch elements (1 for a model that does not batch)."""
        with self.lock:
            (self.success if ok else self.fail).add(total)
            if queue is not None:
                self.queue.add(queue)
            if ok:
                self.inference_count += elements
            self.last_inference_ms = int(time.time() * 1000)

    def execution(self, batch_size: int, compute_input: float, compute_infer: float, compute_output: float) -> None:
        """One execution of `batch_size` elements; its three phases in seconds (charged to every
        request of the batch in Triton; here once per execution, and once per request in `queue`)."""
        with self.lock:
            self.execution_count += 1
            b = self.batch_stats.setdefault(batch_size, BatchStat(batch_size))
            for name, seconds in (
                ("compute_input", compute_input),
                ("compute_infer", compute_infer),
                ("compute_output", compute_output),
            ):
                getattr(self, name).add(seconds)
                getattr(b, name).add(seconds)

    def to_json(self, name: str, version: str) -> dict:
        """One entry of the extension's `model_stats` list (the gRPC ModelStatistics message as JSON)."""
        with self.lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {d: getattr(self, d).to_json() for d in DURATIONS}
                | {"cache_hit": Duration().to_json(), "cache_miss": Duration().to_json()},
                "batch_stats": [
                    {
                        "batch_size": b.batch_size,
                        "compute_input": b.compute_input.to_json(),
                        "compute_infer": b.compute_infer.to_json(),
                        "compute_output": b.compute_output.to_json(),
                    }
                    for _, b in sorted(self.batch_stats.items())
                ],
            }
