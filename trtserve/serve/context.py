"""What one request learned on its way through the server, for its access-log line, its response
headers (X-Model-Version, X-Trtserve-Receipt) and its status metric.

The HTTP middleware creates one per request (`open_context`) and reads it when the response starts
and ends; routing and the generation path fill it in (`request_context`). A gRPC call holds one of
its own (serve/grpc/calls.py); a batch line passes a fresh one that nobody reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trtserve.serve.telemetry.tracing import NO_SPAN, RequestSpan

_KEY = "trtserve.context"  # the ASGI scope entry that holds a request's context


@dataclass
class RequestContext:
    model: str | None = None  # the model the repository routed the request to
    version: str | None = None  # that model's version, as the X-Model-Version header says it
    receipts: list[str] = field(default_factory=list)  # receipt ids of the generations it started
    ttft_ms: float | None = None  # milliseconds to the first token of its first generation to produce one
    prompt_tokens: int | None = None  # summed over its generations, as each ends
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    queue_ms: float | None = None  # milliseconds its first generation to be scheduled waited in the engine's queue
    span: RequestSpan = NO_SPAN  # its trace's server span (serve/telemetry/tracing.py); NO_SPAN when off
    frontend: str = "other"  # the API it came by, a label of the request metrics (`frontend_of`)

    def routed(self, model: str, version: int | str) -> None:
        self.model, self.version = model, str(version)

    def first_token(self, seconds: float) -> None:
        if self.ttft_ms is None:
            self.ttft_ms = round(seconds * 1000, 1)

    def ended(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, queue: float | None = None):
        self.prompt_tokens = (self.prompt_tokens or 0) + prompt_tokens
        self.completion_tokens = (self.completion_tokens or 0) + completion_tokens
        self.cached_tokens = (self.cached_tokens or 0) + cached_tokens
        if self.queue_ms is None and queue is not None:
            self.queue_ms = round(queue * 1000, 1)

    def log_fields(self) -> dict:
        """The access log's fields: those the request got to (a refused request has none)."""
        fields: dict = {}
        if self.span.trace_id is not None:
            fields["trace_id"] = self.span.trace_id
        if self.model is not None:
            fields["model"], fields["version"] = self.model, self.version
        if self.receipts:
            fields["receipts"] = list(self.receipts)
        if self.ttft_ms is not None:
            fields["ttft_ms"] = self.ttft_ms
        if self.prompt_tokens is not None:
            fields["prompt_tokens"], fields["completion_tokens"] = self.prompt_tokens, self.completion_tokens
            fields["cached_tokens"] = self.cached_tokens
        if self.queue_ms is not None:
            fields["queue_ms"] = self.queue_ms
        return fields


def access_line(line: dict, fmt: str) -> str:
    """One request's access-log line (`access_log_format`): JSON, or `text`: `METHOD PATH STATUS DURATIONms`
    then the other fields as key=value (a list joined by commas)."""
    if fmt == "json":
        return json.dumps(line)
    rest = {k: v for k, v in line.items() if k not in ("method", "path", "status", "duration_ms")}
    pairs = " ".join(f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in rest.items())
    return f"{line['method']} {line['path']} {line['status']} {line['duration_ms']}ms {pairs}"


# path prefix -> front end, the first that matches (the `frontend` label of the request metrics)
FRONTENDS = (
    ("/v1/messages", "anthropic"),
    ("/v1/responses", "responses"),
    ("/v1/", "openai"),
    ("/v2/", "kserve"),
)


def frontend_of(path: str) -> str:
    return next((name for prefix, name in FRONTENDS if path.startswith(prefix)), "other")


def open_context(scope: dict) -> RequestContext:
    """The middleware's: a new context for this HTTP request."""
    context = scope[_KEY] = RequestContext(frontend=frontend_of(scope.get("path", "")))
    return context


def request_context(scope: dict) -> RequestContext:
    """The context the middleware opened for this request (`request.scope` in a route)."""
    return scope[_KEY]
