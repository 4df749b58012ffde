"""Tracing on: OpenTelemetry's SDK behind serve/telemetry/tracing.py's interface. Imported only when an
OTLP endpoint is configured (the `otel` extra).

The SDK reads its standard variables itself: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the
resource), OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (the sampler; default parentbased_always_on),
OTEL_EXPORTER_OTLP_TRACES_HEADERS, _TIMEOUT, _INSECURE, _CERTIFICATE (the exporter), OTEL_BSP_* (batching).
The provider is the server's own, not the process-global one, so two apps in one process do not mix.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from trtserve.engine.errors import UserError
from trtserve.engine.version import VERSION
from trtserve.serve.telemetry.tracing_record import RunRecord

PROTOCOLS = ("grpc", "http/protobuf")
PROPAGATOR = TraceContextTextMapPropagator()  # W3C Trace Context: traceparent, tracestate


def otlp_exporter(endpoint: str) -> SpanExporter:
    """OTLP over gRPC (the default, as vLLM's) or HTTP, as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or
    OTEL_EXPORTER_OTLP_PROTOCOL) says. Over HTTP, an endpoint without a path gets OTLP's /v1/traces."""
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        if urlsplit(endpoint).path in ("", "/"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        return OTLPSpanExporter(endpoint=endpoint)
    raise UserError(f"OTLP protocol {protocol!r} is not supported; use one of {', '.join(PROTOCOLS)}")


class OtelTracing:
    enabled = True

    def __init__(self, exporter: SpanExporter | None = None, processor: SpanProcessor | None = None):
        """Spans go to `processor`, or to a BatchSpanProcessor over `exporter` (tests pass a simple one)."""
        resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "trtserve"})
        self.provider = TracerProvider(resource=resource)  # its sampler: OTEL_TRACES_SAMPLER
        self.provider.add_span_processor(processor or BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("trtserve", VERSION)

    def server_span(self, name: str, carrier: Mapping[str, str], attributes: dict, operation: str) -> OtelSpan:
        parent = PROPAGATOR.extract(carrier)
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)
        return OtelSpan(self.tracer, span, operation)

    def job_span(self, name: str, attributes: dict, operation: str) -> OtelSpan:
        span = self.tracer.start_span(name, context=Context(), kind=SpanKind.INTERNAL, attributes=attributes)
        return OtelSpan(self.tracer, span, operation)

    def shutdown(self) -> None:
        """Export what is queued, then stop (the lifespan's end)."""
        self.provider.shutdown()


class OtelSpan:
    """One request's server span and the generation spans under it."""

    def __init__(self, tracer, span, operation: str):
        self.tracer, self.span, self.operation = tracer, span, operation
        ctx = span.get_span_context()
        self.recording = span.is_recording()
        self.trace_id = format(ctx.trace_id, "032x")
        self._traceresponse = f"00-{self.trace_id}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
        # monotonic readings become wall-clock nanoseconds from one pair taken together
        self._wall, self._mono = time.time_ns(), time.monotonic()

    def ns(self, monotonic: float) -> int:
        return self._wall + int((monotonic - self._mono) * 1e9)

    def set(self, key: str, value) -> None:
        self.span.set_attribute(key, value)

    def response_headers(self) -> list[tuple[str, str]]:
        """The trace id (X-Trace-Id), and W3C's draft `traceresponse` naming this span."""
        return [("x-trace-id", self.trace_id), ("traceresponse", self._traceresponse)]

    def propagate(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self.span))
        kept = [(k, v) for k, v in headers if k.decode("latin-1").lower() not in PROPAGATOR.fields]
        return kept + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in carrier.items()]

    def child(self, name: str, attributes: dict) -> OtelSpan:
        parent = trace.set_span_in_context(self.span)
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes)
        return OtelSpan(self.tracer, span, self.operation)

    def record(self, name: str, began: float, ended: float, attributes: Callable[[], dict], error: str | None = None):
        parent = trace.set_span_in_context(self.span)
        s = self.tracer.start_span(name, context=parent, start_time=self.ns(began), attributes=attributes())
        if error is not None:
            s.set_status(Status(StatusCode.ERROR, error))
            s.set_attribute("error.type", error)
        s.end(self.ns(ended))

    def end(self, status: int | str, ok: bool, route: str | None = None) -> None:
        if isinstance(status, int):
            self.span.set_attribute("http.response.status_code", status)
        elif self.span.kind == SpanKind.SERVER:
            self.span.set_attribute("rpc.grpc.status_code", status)
        else:  # a job's or a worker's outcome ("completed", "cancelled", "finished")
            self.span.set_attribute("trtserve.status", status)
        if route is not None:
            self.span.set_attribute("http.route", route)
            self.span.update_name(f"{self.span.attributes.get('http.request.method', 'GET')} {route}")
        if not ok:
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()

    def run_ended(self, record: Callable[[], RunRecord]) -> None:
        """The generate span and its children, from the run's clock readings."""
        r = record()
        t = r.timings
        parent = trace.set_span_in_context(self.span)
        gen = self.tracer.start_span(
            f"{self.operation} {r.model}", context=parent, kind=SpanKind.INTERNAL, start_time=self.ns(t.admitting)
        )
        gen.set_attributes(generate_attributes(self.operation, r))
        inner = trace.set_span_in_context(gen)

        def child(name: str, start: float, end: float, attributes: dict | None = None):
            s = self.tracer.start_span(name, context=inner, start_time=self.ns(start), attributes=attributes)
            return s, self.ns(end)

        s, end = child("admission", t.admitting, t.admitted)
        s.end(end)
        scheduled = t.scheduled
        if scheduled is not None:
            s, end = child("queue", t.started, scheduled)
            s.end(end)
        for g in (tl.grammar for tl in r.timelines if tl.grammar is not None):
            attrs = {"trtserve.grammar.kind": g.kind, "trtserve.grammar.cache_hit": g.cache_hit}
            s, end = child("grammar compile", g.began, g.ended, attrs)
            s.end(end)
        if t.first_token is not None:
            computed = r.prompt_tokens - r.cached_tokens
            attrs = {"trtserve.prompt_tokens": r.prompt_tokens, "trtserve.computed_prompt_tokens": computed}
            s, end = child("prefill", scheduled if scheduled is not None else t.started, t.first_token, attrs)
            self._chunks(s, r)
            s.end(end)
            s, end = child("decode", t.first_token, t.ended, {"gen_ai.usage.output_tokens": r.completion_tokens})
            s.add_event("first_token", {"gen_ai.usage.output_tokens": 1}, timestamp=self.ns(t.first_token))
            s.add_event("last_token", {"gen_ai.usage.output_tokens": r.completion_tokens}, timestamp=end)
            self._verifications(s, r)
            s.end(end)
            attrs = {
                "trtserve.detokenize.tokens": r.completion_tokens,
                "trtserve.detokenize.chunks": r.chunks,
                "trtserve.detokenize.busy_s": r.detokenize_s,
                "trtserve.stream.write_s": r.write_s,
            }
            s, end = child("detokenize", t.first_token, t.ended, attrs)
            s.end(end)
        if r.error is not None:
            gen.set_status(Status(StatusCode.ERROR, r.error))
            gen.set_attribute("error.type", r.error)
        gen.end(self.ns(t.ended))

    def _chunks(self, prefill, r: RunRecord) -> None:
        """One span per prefill chunk under `prefill` (a chunked or recomputed prompt has several)."""
        parent = trace.set_span_in_context(prefill)
        for tl in r.timelines:
            for i, c in enumerate(tl.prefill_chunks):
                attrs = {
                    "trtserve.prefill.chunk": i,
                    "trtserve.prefill.start": c.start,
                    "trtserve.prefill.tokens": c.tokens,
                    "trtserve.cached_tokens": c.cached_tokens,
                }
                s = self.tracer.start_span(
                    "prefill chunk", context=parent, start_time=self.ns(c.began), attributes=attrs
                )
                s.end(self.ns(c.ended))

    def _verifications(self, decode, r: RunRecord) -> None:
        """A sequence's verifications: one span under `decode` with an event per verification step, as
        OpenTelemetry advises for work as frequent as tokens (a span each would cost more than the step)."""
        parent = trace.set_span_in_context(decode)
        for tl in r.timelines:
            v = tl.verifications
            if not v:
                continue
            attrs = {
                "trtserve.spec.verifications": len(v),
                "trtserve.spec.draft_tokens": sum(x.proposed for x in v),
                "trtserve.spec.accepted_tokens": sum(x.accepted for x in v),
            }
            s = self.tracer.start_span(
                "speculative verification", context=parent, start_time=self.ns(v[0].began), attributes=attrs
            )
            for x in v:
                counts = {"trtserve.spec.proposed": x.proposed, "trtserve.spec.accepted": x.accepted}
                s.add_event("verified", counts, timestamp=self.ns(x.ended))
            s.end(self.ns(v[-1].ended))


def generate_attributes(operation: str, r: RunRecord) -> dict:
    """OpenTelemetry's GenAI semantic conventions (gen_ai.*), then ours (trtserve.*)."""
    p = r.params
    attrs = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "trtserve",
        "gen_ai.request.model": r.model,
        "gen_ai.response.model": r.model,
        "gen_ai.response.id": r.receipt_id,
        "gen_ai.request.max_tokens": p.max_tokens,
        "gen_ai.request.temperature": p.temperature,
        "gen_ai.request.top_p": p.top_p,
        "gen_ai.request.top_k": p.top_k,
        "gen_ai.request.presence_penalty": p.presence_penalty,
        "gen_ai.request.frequency_penalty": p.frequency_penalty,
        "gen_ai.request.choice.count": p.n,
        "gen_ai.usage.input_tokens": r.prompt_tokens,
        "gen_ai.usage.output_tokens": r.completion_tokens,
        "gen_ai.response.finish_reasons": list(r.finish_reasons),
        "trtserve.model_version": r.version,
        "trtserve.priority": r.priority,
        "trtserve.cached_tokens": r.cached_tokens,
        "trtserve.preemptions": r.preemptions,
        "trtserve.protocol": r.protocol,
    }
    if p.seed is not None:
        attrs["gen_ai.request.seed"] = p.seed
    if p.stop:
        attrs["gen_ai.request.stop_sequences"] = list(p.stop)
    if r.adapter is not None:
        attrs["trtserve.adapter"] = r.adapter
    if r.timings.queue_time is not None:
        attrs["trtserve.queue_time_s"] = r.timings.queue_time
    if r.timings.first_token is not None:
        attrs["trtserve.time_to_first_token_s"] = r.timings.first_token - r.timings.started
    return attrs
