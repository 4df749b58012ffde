"""Tracing (serve/telemetry/tracing*.py) without a model: off imports no SDK; on, a request's span tree
continues the caller's traceparent and carries the GenAI attributes; the per-request timings' arithmetic."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from trtserve.engine.errors import UserError  # noqa: E402
from trtserve.engine.sampling import SamplingParams  # noqa: E402
from trtserve.serve.config import ServeConfig  # noqa: E402
from trtserve.serve.telemetry.timings import RunTimings, metrics_field, request_metrics  # noqa: E402
from trtserve.serve.telemetry.tracing import NO_SPAN, NO_TRACING, open_tracing
from trtserve.serve.telemetry.tracing_otel import OtelTracing, otlp_exporter  # noqa: E402
from trtserve.serve.telemetry.tracing_record import RunRecord  # noqa: E402
from trtserve.text.outputs import CompletionOutput, RequestOutput  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    tracing = OtelTracing(processor=SimpleSpanProcessor(exporter))
    yield tracing, exporter
    tracing.shutdown()


def _record(**over) -> RunRecord:
    timings = RunTimings(admitting=10.0, admitted=10.001, started=10.002, queue_time=0.5, first_token=10.8, ended=11.8)
    fields = dict(
        model="tiny",
        version="1",
        adapter=None,
        priority=0.0,
        receipt_id="rcpt-1",
        params=SamplingParams(max_tokens=11, temperature=0.0, seed=7),
        timings=timings,
        prompt_tokens=20,
        completion_tokens=11,
        cached_tokens=16,
        preemptions=0,
        finish_reasons=["length"],
    )
    return RunRecord(**(fields | over))


def test_off_is_the_null_span_and_imports_no_sdk(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert open_tracing(ServeConfig()) is NO_TRACING
    assert NO_TRACING.server_span("GET /", {"traceparent": TRACEPARENT}, {}, "chat") is NO_SPAN
    assert NO_SPAN.response_headers() == [] and NO_SPAN.trace_id is None
    code = (
        "import sys\n"
        "import trtserve.serve.app, trtserve.serve.grpc.server\n"
        "from trtserve.serve.config import ServeConfig\n"
        "from trtserve.serve.telemetry.tracing import NO_TRACING, open_tracing\n"
        "assert open_tracing(ServeConfig()) is NO_TRACING\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))"
        " or m.endswith('tracing_otel'))\n"
        "assert not bad, bad\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    r = subprocess.run(
        [sys.executable, "-c", code, "/nonexistent"], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_sdk_disabled_turns_it_off(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert open_tracing(ServeConfig(otlp_traces_endpoint="http://127.0.0.1:4317")) is NO_TRACING


def test_a_missing_extra_is_one_clear_sentence(monkeypatch):
    monkeypatch.setitem(sys.modules, "trtserve.serve.telemetry.tracing_otel", None)  # import fails
    with pytest.raises(UserError, match=r"pip install 'trtserve\[otel\]'"):
        open_tracing(ServeConfig(otlp_traces_endpoint="http://127.0.0.1:4317"))


def test_the_server_span_continues_the_callers_trace(traced):
    tracing, exporter = traced
    span = tracing.server_span(
        "POST /v1/chat/completions", {"traceparent": TRACEPARENT}, {"http.request.method": "POST"}, "chat"
    )
    assert span.trace_id == TRACE
    headers = dict(span.response_headers())
    assert headers["x-trace-id"] == TRACE
    assert headers["traceresponse"].startswith(f"00-{TRACE}-") and headers["traceresponse"].endswith("-01")
    span.end(200, True, "/v1/chat/completions")
    (s,) = exporter.get_finished_spans()
    assert s.kind is SpanKind.SERVER and s.name == "POST /v1/chat/completions"
    assert s.parent.span_id == int(PARENT, 16) and s.parent.is_remote
    assert s.attributes["http.response.status_code"] == 200 and s.attributes["http.route"] == "/v1/chat/completions"


def test_without_traceparent_a_new_trace_starts(traced):
    tracing, exporter = traced
    span = tracing.server_span("POST /v2/models/m/generate", {}, {}, "text_completion")
    assert span.trace_id not in (None, TRACE) and len(span.trace_id) == 32
    span.end(503, False)
    (s,) = exporter.get_finished_spans()
    assert s.parent is None and s.status.status_code is StatusCode.ERROR


def test_a_generation_is_a_tree_built_from_its_timings(traced):
    tracing, exporter = traced
    span = tracing.server_span("POST /v1/chat/completions", {"traceparent": TRACEPARENT}, {}, "chat")
    span.run_ended(_record)
    span.end(200, True)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"POST /v1/chat/completions", "chat tiny", "admission", "queue", "prefill", "decode"}
    server, gen = spans["POST /v1/chat/completions"], spans["chat tiny"]
    assert gen.parent.span_id == server.context.span_id
    for name in ("admission", "queue", "prefill", "decode"):
        assert spans[name].parent.span_id == gen.context.span_id
        assert spans[name].context.trace_id == int(TRACE, 16)
    a = gen.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "tiny"
    assert a["gen_ai.request.max_tokens"] == 11 and a["gen_ai.request.seed"] == 7
    assert a["gen_ai.usage.input_tokens"] == 20 and a["gen_ai.usage.output_tokens"] == 11
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("length",)
    assert a["trtserve.cached_tokens"] == 16 and a["trtserve.model_version"] == "1"
    # the children tile the run: queue ends where prefill starts, prefill where decode starts
    ms = {n: ((s.end_time - s.start_time) / 1e6) for n, s in spans.items()}
    assert ms["queue"] == pytest.approx(500, abs=0.01) and ms["prefill"] == pytest.approx(298, abs=0.01)
    assert ms["decode"] == pytest.approx(1000, abs=0.01)
    assert spans["queue"].end_time == spans["prefill"].start_time
    assert spans["prefill"].end_time == spans["decode"].start_time == spans["decode"].events[0].timestamp
    assert [e.attributes["gen_ai.usage.output_tokens"] for e in spans["decode"].events] == [1, 11]
    assert spans["prefill"].attributes["trtserve.computed_prompt_tokens"] == 4


def test_a_failed_generation_that_never_ran_has_no_prefill(traced):
    tracing, exporter = traced
    span = tracing.server_span("POST /v1/completions", {}, {}, "text_completion")
    timings = RunTimings(admitting=1.0, admitted=1.0, started=1.0, queue_time=None, first_token=None, ended=2.0)
    span.run_ended(lambda: _record(timings=timings, completion_tokens=0, finish_reasons=[], error="deadline"))
    span.end(504, True)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"POST /v1/completions", "text_completion tiny", "admission"}
    gen = spans["text_completion tiny"]
    assert gen.status.status_code is StatusCode.ERROR and gen.attributes["error.type"] == "deadline"


def _output(tokens: list[int], prompt: int = 8, cached: int = 0) -> RequestOutput:
    return RequestOutput("r", list(range(prompt)), [CompletionOutput(0, token_ids=tokens)], num_cached_tokens=cached)


def test_request_metrics():
    t = RunTimings(admitting=0.0, admitted=0.0, started=1.0, queue_time=0.25, first_token=1.75, ended=2.75)
    m = request_metrics(t, _output([1, 2, 3, 4, 5], cached=4))
    assert m.time_to_first_token == 0.75 and m.queue_time == 0.25 and m.prefill_time == 0.5
    assert m.generation_time == 1.0 and m.e2e_latency == 1.75
    assert m.mean_inter_token_latency == 0.25 and m.tokens_per_second == 4.0
    assert (m.prompt_tokens, m.completion_tokens, m.cached_tokens) == (8, 5, 4)
    out = _output([1])
    out.metrics = request_metrics(RunTimings(0.0, 0.0, 1.0, None, None, 3.0), out)
    assert out.metrics.time_to_first_token is None and out.metrics.e2e_latency == 2.0
    assert metrics_field([_output([1])]) is None  # not asked for
    assert metrics_field([out])["e2e_latency"] == 2.0 and len(metrics_field([out, out])) == 2


class _Receiver(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        self.got.append((self.path, trace_service_pb2.ExportTraceServiceRequest.FromString(body)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

    def log_message(self, *args):
        pass


def test_otlp_over_http_reaches_a_receiver(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trtserve-test")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        exporter = otlp_exporter(f"http://127.0.0.1:{httpd.server_address[1]}")  # gets /v1/traces
        tracing = OtelTracing(processor=SimpleSpanProcessor(exporter))
        tracing.server_span("POST /v1/completions", {"traceparent": TRACEPARENT}, {}, "chat").end(200, True)
        tracing.shutdown()
    finally:
        httpd.shutdown()
    (path, req), *_ = _Receiver.got
    assert path == "/v1/traces"
    rs = req.resource_spans[0]
    assert {a.key: a.value.string_value for a in rs.resource.attributes}["service.name"] == "trtserve-test"
    (span,) = rs.scope_spans[0].spans
    assert span.trace_id.hex() == TRACE and span.parent_span_id.hex() == PARENT


def test_an_unknown_protocol_is_refused(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(UserError, match="grpc, http/protobuf"):
        otlp_exporter("http://127.0.0.1:4318")
