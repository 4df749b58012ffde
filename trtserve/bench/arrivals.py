"""Request arrival times: a Poisson process, or a gamma renewal process for bursty or smooth traffic.

As `vllm bench serve` does: gaps are Gamma(shape=burstiness, scale=1 / (rate * burstiness)), so the mean
gap is 1 / rate for any burstiness and the variance is 1 / (rate^2 * burstiness). burstiness = 1 is a
Poisson process (exponential gaps); < 1 is burstier, > 1 smoother; rate = inf sends everything at once.
"""

from __future__ import annotations

import math

import numpy as np


def inter_arrival_gaps(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """`n` seeded gaps in seconds before each request (all zero when rate is inf)."""
    if not rate > 0:
        raise ValueError(f"request rate must be positive (or inf), got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        return np.full(n, 1.0 / rate)
    rng = np.random.default_rng(seed)
    return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Send times in seconds from the start, nondecreasing.

    Like vLLM, the cumulative gaps are rescaled so the last request goes out at exactly n / rate:
    the realised rate then does not drift by a few percent between seeds.
    """
    offsets = np.cumsum(inter_arrival_gaps(n, rate, burstiness, seed))
    if n and offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return offsets
