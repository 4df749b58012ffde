"""A Dynamo worker's tracing on: OpenTelemetry's SDK behind trtserve/dynamo/tracing.py (imported only when
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set)."""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from trtserve.dynamo.work_span import WorkSpan
from trtserve.engine.version import VERSION


def _exporter(endpoint: str) -> SpanExporter:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    )
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        if urlsplit(endpoint).path in ("", "/"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        return OTLPSpanExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint)


class OtelWorkTracing:
    enabled = True

    def __init__(self, endpoint: str | None, service_name: str, processor: SpanProcessor | None = None):
        """Spans go to `processor`, or to a BatchSpanProcessor over the OTLP exporter (tests pass their own)."""
        name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        self.provider = TracerProvider(resource=Resource.create({"service.name": name}))
        self.provider.add_span_processor(processor or BatchSpanProcessor(_exporter(endpoint or "")))
        self.tracer = self.provider.get_tracer("trtserve.dynamo", VERSION)
        self.propagator = TraceContextTextMapPropagator()

    def span(self, name: str, carrier: dict[str, str] | None, attributes: dict) -> WorkSpan:
        return WorkSpan(name, dict(carrier or {}), dict(attributes))

    def end(self, w: WorkSpan | None) -> None:
        """Build and end the request's span (and its first-token event) from its readings."""
        if w is None:
            return
        wall, mono = time.time_ns(), time.monotonic()

        def ns(t: float) -> int:
            return wall + int((t - mono) * 1e9)

        parent = self.propagator.extract(w.carrier)
        span = self.tracer.start_span(
            w.name, context=parent, kind=SpanKind.SERVER, attributes=w.attributes, start_time=ns(w.started)
        )
        span.set_attribute("gen_ai.usage.output_tokens", w.output_tokens)
        if w.finish_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [w.finish_reason])
        if w.first_token is not None:
            span.add_event("first_token", {"gen_ai.usage.output_tokens": 1}, timestamp=ns(w.first_token))
            span.set_attribute("trtserve.time_to_first_token_s", w.first_token - w.started)
        if w.error is not None:
            span.set_status(Status(StatusCode.ERROR, w.error))
            span.set_attribute("error.type", w.error)
        span.end(ns(mono))

    def shutdown(self) -> None:
        self.provider.shutdown()
