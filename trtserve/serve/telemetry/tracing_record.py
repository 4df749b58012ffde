"""What a generation reports to its request's trace as it ends (serve/telemetry/tracing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.engine.sampling import SamplingParams
from trtserve.serve.telemetry.timings import RunTimings


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What a generation reports to its request's span as it ends (GenerationRun's finally)."""

    model: str  # the served name (an adapter's, in an adapter's view)
    version: str  # the repository version that ran it
    adapter: str | None
    priority: float
    receipt_id: str
    params: SamplingParams
    timings: RunTimings
    prompt_tokens: int
    completion_tokens: int  # over its n sequences
    cached_tokens: int  # prompt tokens served by the prefix cache
    preemptions: int
    finish_reasons: list[str] = field(default_factory=list)  # one per finished sequence
    error: str | None = None  # why it failed (an APIError's message, or a cancellation)
    protocol: str = "http"
