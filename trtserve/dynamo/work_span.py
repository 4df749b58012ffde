"""One request's span on a Dynamo worker, as its readings arrive (tracing.py builds the span at its end)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class WorkSpan:
    """One request on this worker: what its span will say, filled in as the stream goes."""

    name: str  # "prefill MODEL", "decode MODEL", "generate MODEL"
    carrier: dict[str, str]  # the trace context Dynamo passed (traceparent, tracestate)
    attributes: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    first_token: float | None = None
    output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None

    def token(self, n: int) -> None:
        if n and self.first_token is None:
            self.first_token = time.monotonic()
        self.output_tokens += n
