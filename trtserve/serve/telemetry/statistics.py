"""Per-model inference statistics in Triton's shape (counts and cumulative durations), for the
gRPC ModelStatistics RPC. Every front end's requests are counted: they share GenerationService.

Triton splits a request's time into queue, compute_input, compute_infer and compute_output. Our
engine interleaves detokenization with generation, so compute_input and compute_output stay zero
and compute_infer is the time from first scheduling to the last token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from trtserve.tensor.stats import Duration


@dataclass
class InferStatistics:
    success: Duration = field(default_factory=Duration)  # whole request, for those that finished
    fail: Duration = field(default_factory=Duration)  # whole request, for errors, deadlines and aborts
    queue: Duration = field(default_factory=Duration)  # arrival -> first scheduling
    compute_infer: Duration = field(default_factory=Duration)  # first scheduling -> last token
    compute_input: Duration = field(default_factory=Duration)  # stays zero (see the module docstring)
    compute_output: Duration = field(default_factory=Duration)  # stays zero
    inference_count: int = 0  # successful requests (Triton counts batch items; each prompt is one)
    last_inference_ms: int = 0  # ms since the epoch when the last request ended; 0 before any

    def record(self, ok: bool, total: float, queue: float | None) -> None:
        """One request ended after `total` seconds, `queue` of them waiting (None: never scheduled)."""
        (self.success if ok else self.fail).add(total)
        if queue is not None:
            self.queue.add(queue)
            self.compute_infer.add(total - queue)
        self.inference_count += ok
        self.last_inference_ms = int(time.time() * 1000)
