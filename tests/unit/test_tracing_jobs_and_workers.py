"""Spans without a server (docs/observability.md): a batch job's span roots its own trace and its lines are
children; a Dynamo worker's span continues the trace context Dynamo passed, two workers' spans siblings;
both are no-ops that import nothing while tracing is off."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from trtserve.dynamo.tracing import NO_WORK_TRACING, open_work_tracing  # noqa: E402
from trtserve.dynamo.tracing_otel import OtelWorkTracing  # noqa: E402
from trtserve.serve.telemetry.tracing import NO_SPAN, NO_TRACING  # noqa: E402
from trtserve.serve.telemetry.tracing_otel import OtelTracing  # noqa: E402

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_off_is_a_no_op():
    assert NO_TRACING.job_span("batch b", {}, "chat") is NO_SPAN
    assert NO_SPAN.child("line", {}) is NO_SPAN


def test_a_job_span_roots_a_trace_and_lines_are_children():
    exporter = InMemorySpanExporter()
    tracing = OtelTracing(processor=SimpleSpanProcessor(exporter))
    job = tracing.job_span("batch b1", {"trtserve.batch_id": "b1"}, "chat")
    line = job.child("batch line x", {"trtserve.batch.custom_id": "x"})
    line.end(500, False)
    job.end("completed", True)
    tracing.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    j, ln = spans["batch b1"], spans["batch line x"]
    assert j.parent is None and j.kind == SpanKind.INTERNAL
    assert ln.parent.span_id == j.context.span_id and ln.context.trace_id == j.context.trace_id
    assert ln.attributes["http.response.status_code"] == 500 and ln.status.status_code == StatusCode.ERROR
    assert j.attributes["trtserve.status"] == "completed" and "rpc.grpc.status_code" not in j.attributes
    assert line.operation == "chat"  # a line's generation is named as its job's endpoint says


def test_worker_spans_are_siblings_under_the_callers(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert open_work_tracing("w") is NO_WORK_TRACING and NO_WORK_TRACING.span("x", None, {}) is None
    exporter = InMemorySpanExporter()
    tracing = OtelWorkTracing(None, "trtserve-dynamo-test", SimpleSpanProcessor(exporter))
    carrier = {"traceparent": f"00-{TRACE}-{PARENT}-01"}
    prefill = tracing.span("prefill tiny", carrier, {"trtserve.dynamo.role": "prefill"})
    prefill.token(1)
    prefill.finish_reason = "length"
    decode = tracing.span("decode tiny", carrier, {"trtserve.dynamo.role": "decode"})
    decode.token(1)
    decode.token(2)
    decode.error = "cancelled"
    tracing.end(prefill)
    tracing.end(decode)
    tracing.end(None)  # tracing off for that request: nothing
    tracing.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    p, d = spans["prefill tiny"], spans["decode tiny"]
    for s in (p, d):
        assert s.kind == SpanKind.SERVER and format(s.context.trace_id, "032x") == TRACE
        assert format(s.parent.span_id, "016x") == PARENT
        assert [e.name for e in s.events] == ["first_token"] and s.start_time <= s.events[0].timestamp <= s.end_time
    assert p.attributes["gen_ai.usage.output_tokens"] == 1 and p.attributes["gen_ai.response.finish_reasons"] == (
        "length",
    )
    assert d.attributes["gen_ai.usage.output_tokens"] == 3 and d.status.status_code == StatusCode.ERROR
    assert d.resource.attributes["service.name"] == "trtserve-dynamo-test"
