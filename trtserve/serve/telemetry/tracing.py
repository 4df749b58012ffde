"""OpenTelemetry traces of every request (docs/observability.md): off unless an OTLP endpoint is given.

`open_tracing(config)` returns the server's `Tracing`: `NoTracing` when off, which imports nothing of
OpenTelemetry and hands out the one `NO_SPAN` (every method a no-op), so the request path never asks
whether tracing is on; `OtelTracing` (tracing_otel.py, the SDK imported only there) when on.

A front end opens one server span per request (`Tracing.server_span`, continuing the caller's W3C
`traceparent` / `tracestate`), keeps it on the request's RequestContext, and ends it with the status.
Each generation of the request reports its timings once, as it ends (`RequestSpan.run_ended`); the
generate span and its queue / prefill / decode children, and the engine's prefill chunks, verifications
and grammar compile (its timeline, asked for only while the span records) are built from them after the
fact, so no per-token work is added even when tracing is on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from trtserve.engine.errors import UserError
from trtserve.serve.telemetry.tracing_record import RunRecord

if TYPE_CHECKING:
    from trtserve.serve.config import ServeConfig

TRACE_HEADERS = ("traceparent", "tracestate")  # W3C Trace Context, read from HTTP headers and gRPC metadata


class RequestSpan(Protocol):
    trace_id: str | None  # 32 lowercase hex digits; None when tracing is off
    recording: bool  # its spans are kept (on and sampled): its generations ask the engine for their timelines

    def set(self, key: str, value) -> None: ...
    def run_ended(self, record: Callable[[], RunRecord]) -> None:
        """One of the request's generations ended; `record()` says how (called only when tracing is on)."""

    def response_headers(self) -> list[tuple[str, str]]: ...
    def propagate(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """ASGI `headers` for the next hop, naming this span as its caller (W3C traceparent / tracestate);
        unchanged while tracing is off."""

    def end(self, status: int | str, ok: bool, route: str | None = None) -> None: ...
    def child(self, name: str, attributes: dict) -> RequestSpan:
        """An INTERNAL span under this one, with the same interface (a batch line under its job, a
        worker's prefill under its request); its generations go under it."""

    def record(self, name: str, began: float, ended: float, attributes: Callable[[], dict], error: str | None = None):
        """A finished INTERNAL span under this one from two `time.monotonic()` readings (a pooling call, a
        reply's parse); `attributes()` is called only when tracing is on. `error`: why it failed (status ERROR)."""


class NoSpan:
    """The span of every request while tracing is off: does nothing."""

    trace_id = None
    recording = False

    def set(self, key: str, value) -> None:
        pass

    def run_ended(self, record: Callable[[], RunRecord]) -> None:
        pass

    def response_headers(self) -> list[tuple[str, str]]:
        return []

    def propagate(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        return headers

    def end(self, status: int | str, ok: bool, route: str | None = None) -> None:
        pass

    def child(self, name: str, attributes: dict) -> RequestSpan:
        return self

    def record(self, name: str, began: float, ended: float, attributes: Callable[[], dict], error: str | None = None):
        pass


NO_SPAN = NoSpan()


class Tracing(Protocol):
    enabled: bool

    def server_span(self, name: str, carrier: Mapping[str, str], attributes: dict, operation: str) -> RequestSpan:
        """A SERVER span continuing `carrier`'s traceparent (a new trace without one); `operation`: the
        GenAI operation its generations perform (`operation_of`)."""

    def job_span(self, name: str, attributes: dict, operation: str) -> RequestSpan:
        """An INTERNAL span that roots a new trace for work no request waits on (a batch job's run)."""

    def shutdown(self) -> None: ...


class NoTracing:
    enabled = False

    def server_span(self, name: str, carrier: Mapping[str, str], attributes: dict, operation: str) -> RequestSpan:
        return NO_SPAN

    def job_span(self, name: str, attributes: dict, operation: str) -> RequestSpan:
        return NO_SPAN

    def shutdown(self) -> None:
        pass


NO_TRACING = NoTracing()


def traces_endpoint(config: ServeConfig) -> str | None:
    """The OTLP endpoint traces go to: `--otlp-traces-endpoint`, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
    None (tracing off) without one, or with OTEL_SDK_DISABLED=true."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return config.otlp_traces_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None


def open_tracing(config: ServeConfig) -> Tracing:
    """The server's tracing: off (nothing imported) unless an endpoint is configured. Raises UserError
    when one is but the `otel` extra is not installed."""
    endpoint = traces_endpoint(config)
    if endpoint is None:
        return NO_TRACING
    try:
        from trtserve.serve.telemetry.tracing_otel import OtelTracing, otlp_exporter
    except ImportError as err:
        raise UserError(
            f"--otlp-traces-endpoint needs OpenTelemetry's SDK and OTLP exporters ({err.name} is missing); "
            "pip install 'trtserve[otel]'"
        ) from None
    return OtelTracing(otlp_exporter(endpoint))


# gen_ai.operation.name of the generating routes (OpenTelemetry's GenAI semantic conventions)
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/completions": "text_completion",
}


def operation_of(path: str) -> str:
    """The GenAI operation a request's generations perform (KServe generate and gRPC infer: text_completion)."""
    return OPERATIONS.get(path, "text_completion")
