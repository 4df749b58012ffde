"""What a generation reports to its request's trace as it ends (serve/telemetry/tracing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.engine.sampling import SamplingParams
from trtserve.engine.timeline import Timeline
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
    timelines: tuple[Timeline, ...] = ()  # what the engine timed of its sequences (none from an engine that does not)
    chunks: int = 0  # text deltas its consumer took (a streamed request's chunks)
    detokenize_s: float = 0.0  # seconds in incremental detokenization and stop strings
    write_s: float = 0.0  # seconds its consumer held the chunks (a stream's formatting and writes)
