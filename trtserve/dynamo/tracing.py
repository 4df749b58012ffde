"""A Dynamo worker's spans (docs/observability.md, "Across processes"): one span per request the worker serves,
continuing the W3C trace context Dynamo hands the worker (`context.trace_headers()`: the caller's
`traceparent`, or Dynamo's own `engine.generate` span when Dynamo traces too). In a disaggregated run the
prefill worker's and the decode worker's spans are siblings under that parent.

Off unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not true); off imports
nothing of OpenTelemetry and every request gets the one `NO_WORK_SPAN`. The worker may not import serve/,
so this is its own small builder over the SDK; the span is built as the request ends, from the clock
readings the worker takes (arrival, first token, end), as the server's generation spans are.
"""

from __future__ import annotations

import os

from trtserve.dynamo.work_span import WorkSpan


class NoWorkTracing:
    enabled = False

    def span(self, name: str, carrier: dict[str, str] | None, attributes: dict) -> WorkSpan | None:
        return None

    def end(self, span: WorkSpan | None) -> None:
        pass

    def shutdown(self) -> None:
        pass


NO_WORK_TRACING = NoWorkTracing()


def open_work_tracing(service_name: str):
    """The worker's tracing: off without OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (OTLP over gRPC, or HTTP by
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf); raises UserError when set but the SDK is missing."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return NO_WORK_TRACING
    try:
        from trtserve.dynamo.tracing_otel import OtelWorkTracing
    except ImportError as err:
        from trtserve.engine.errors import UserError

        raise UserError(
            f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set but OpenTelemetry's SDK is missing ({err.name}); "
            "pip install 'trtserve[otel]'"
        ) from None
    return OtelWorkTracing(endpoint, service_name)
