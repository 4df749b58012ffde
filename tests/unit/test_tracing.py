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
from trtserve.engine.timeline import GrammarCompile, PrefillChunk, Timeline, Verification  # noqa: E402
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


def test_a_hop_forwards_its_own_span_as_the_parent(traced):
    """A frontend (deploy/ray.py's PrefixFrontend) hands the next hop a traceparent naming its span."""
    tracing, _ = traced
    raw = [(b"Traceparent", TRACEPARENT.encode()), (b"tracestate", b"k=v"), (b"x-request-id", b"r")]
    assert NO_SPAN.propagate(raw) is raw
    carrier = {"traceparent": TRACEPARENT, "tracestate": "k=v"}
    span = tracing.server_span("POST /v1/completions", carrier, {}, "text_completion")
    out = dict(span.propagate(raw))
    span_id = format(span.span.get_span_context().span_id, "016x")
    assert out[b"traceparent"] == f"00-{TRACE}-{span_id}-01".encode() and b"Traceparent" not in out
    assert out[b"tracestate"] == b"k=v" and out[b"x-request-id"] == b"r" and len(out) == 3
    span.end(200, True)


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
    span.run_ended(lambda: _record(chunks=4, detokenize_s=0.002, write_s=0.01))
    span.end(200, True)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    names = {"POST /v1/chat/completions", "chat tiny", "admission", "queue", "prefill", "decode", "detokenize"}
    assert set(spans) == names
    server, gen = spans["POST /v1/chat/completions"], spans["chat tiny"]
    assert gen.parent.span_id == server.context.span_id
    for name in ("admission", "queue", "prefill", "decode", "detokenize"):
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
    # detokenize/stream: one span from the first token to the end, its counts as attributes
    detok = spans["detokenize"]
    assert (detok.start_time, detok.end_time) == (spans["decode"].start_time, gen.end_time)
    assert dict(detok.attributes) == {
        "trtserve.detokenize.tokens": 11,
        "trtserve.detokenize.chunks": 4,
        "trtserve.detokenize.busy_s": 0.002,
        "trtserve.stream.write_s": 0.01,
    }


def test_a_recorded_span_is_a_child_with_its_readings_and_attributes(traced):
    """`record`: a finished span under the request's (a pooling call, a reply's parse); off, a no-op that
    never asks for its attributes."""
    tracing, exporter = traced
    NO_SPAN.record("embeddings m", 1.0, 2.0, lambda: pytest.fail("asked for attributes while off"))
    span = tracing.server_span("POST /v1/embeddings", {"traceparent": TRACEPARENT}, {}, "text_completion")
    span.record("embeddings m", 10.0, 10.25, lambda: {"trtserve.pooling.documents": 3})
    span.record("rerank m", 10.0, 10.5, lambda: {}, error="the engine failed")
    span.end(200, True)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    server, ok, failed = spans["POST /v1/embeddings"], spans["embeddings m"], spans["rerank m"]
    assert ok.parent.span_id == failed.parent.span_id == server.context.span_id
    assert ok.kind is SpanKind.INTERNAL and dict(ok.attributes) == {"trtserve.pooling.documents": 3}
    assert (ok.end_time - ok.start_time) / 1e6 == pytest.approx(250, abs=0.01)
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"] == "the engine failed"


def test_a_reply_parse_is_one_span_with_its_parsers_and_counts(traced):
    """The reply split (serve/openai/reply.py), streamed piece by piece: one `reply parse` span when it ends,
    none while tracing is off."""
    from trtserve.serve.openai.reply import ReplyPlan
    from trtserve.serve.openai.tools import Tool, ToolPlan

    tool = Tool.model_validate({"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}})
    plan = ReplyPlan(ToolPlan([tool], "auto", None, parser="hermes"), "think", starts_inside=False)
    text = '<think>why</think>ok <tool_call>{"name": "get", "arguments": {}}</tool_call>'
    pieces = [text[:10], text[10:30], text[30:]]
    off = plan.stream()
    for i, piece in enumerate(pieces):
        off.delta(piece, final=i == len(pieces) - 1)
    tracing, exporter = traced
    span = tracing.server_span("POST /v1/chat/completions", {}, {}, "chat")
    split = plan.stream(span)
    for i, piece in enumerate(pieces):
        split.delta(piece, final=i == len(pieces) - 1)
    ReplyPlan(ToolPlan(None, None, None), "none", starts_inside=False).stream(span).message("no parser reads this")
    span.end(200, True)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert [s.name for s in exporter.get_finished_spans()].count("reply parse") == 1
    parse = spans["reply parse"]
    assert parse.parent.span_id == spans["POST /v1/chat/completions"].context.span_id
    a = dict(parse.attributes)
    assert a.pop("trtserve.parse.busy_s") > 0
    assert a == {
        "trtserve.parse.reasoning_parser": "think",
        "trtserve.parse.tool_parser": "hermes",
        "trtserve.parse.pieces": 3,
        "trtserve.parse.reasoning_chars": 3,
        "trtserve.parse.content_chars": 3,
        "trtserve.parse.tool_calls": 1,
    }


def test_the_engines_timeline_adds_chunk_verification_and_grammar_spans(traced):
    """Prefill chunks under prefill, one verification span with an event per step under decode, the grammar's
    compile under the generation; each at the engine's clock readings."""
    tracing, exporter = traced
    timeline = Timeline(
        prefill_chunks=[PrefillChunk(10.5, 10.6, 16, 8, 16), PrefillChunk(10.6, 10.79, 24, 4, 0)],
        verifications=[Verification(10.8, 10.9, 4, 3), Verification(10.9, 11.0, 4, 0)],
        grammar=GrammarCompile(10.002, 10.3, "json_schema", False),
    )
    span = tracing.server_span("POST /v1/chat/completions", {"traceparent": TRACEPARENT}, {}, "chat")
    assert span.recording and not NO_SPAN.recording
    span.run_ended(lambda: _record(timelines=(timeline,)))
    span.end(200, True)
    spans: dict[str, list] = {}
    for s in exporter.get_finished_spans():
        spans.setdefault(s.name, []).append(s)
    (gen,), (prefill,), (decode,) = spans["chat tiny"], spans["prefill"], spans["decode"]
    (grammar,), (verify,), chunks = spans["grammar compile"], spans["speculative verification"], spans["prefill chunk"]
    assert grammar.parent.span_id == gen.context.span_id
    assert dict(grammar.attributes) == {"trtserve.grammar.kind": "json_schema", "trtserve.grammar.cache_hit": False}
    assert (grammar.end_time - grammar.start_time) / 1e6 == pytest.approx(298, abs=0.01)
    assert [c.parent.span_id for c in chunks] == [prefill.context.span_id] * 2
    assert [dict(c.attributes) for c in chunks] == [
        {"trtserve.prefill.chunk": 0, "trtserve.prefill.start": 16, "trtserve.prefill.tokens": 8,
         "trtserve.cached_tokens": 16},
        {"trtserve.prefill.chunk": 1, "trtserve.prefill.start": 24, "trtserve.prefill.tokens": 4,
         "trtserve.cached_tokens": 0},
    ]  # fmt: skip
    assert chunks[0].end_time == chunks[1].start_time
    assert verify.parent.span_id == decode.context.span_id
    counts = [verify.attributes[f"trtserve.spec.{k}"] for k in ("verifications", "draft_tokens", "accepted_tokens")]
    assert counts == [2, 8, 3] and {e.name for e in verify.events} == {"verified"}
    assert [e.attributes["trtserve.spec.accepted"] for e in verify.events] == [3, 0]
    assert verify.start_time < verify.events[0].timestamp < verify.events[1].timestamp == verify.end_time


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


def test_the_access_log_line_as_json_or_text():
    """`--access-log-format`: the same fields, as JSON (the default) or one readable line."""
    from click.testing import CliRunner

    from trtserve.cli.run import command
    from trtserve.serve.config import load_serve_config
    from trtserve.serve.context import access_line

    line = {"request_id": "r1", "method": "POST", "path": "/v1/completions", "status": 200, "duration_ms": 41.2}
    line |= {"trace_id": TRACE, "model": "tiny", "version": "1", "receipts": ["rcpt-1", "rcpt-2"], "ttft_ms": 3.5}
    assert access_line(line, "json") == __import__("json").dumps(line)
    assert access_line(line, "text") == (
        f"POST /v1/completions 200 41.2ms request_id=r1 trace_id={TRACE} model=tiny version=1 "
        "receipts=rcpt-1,rcpt-2 ttft_ms=3.5"
    )
    assert ServeConfig().access_log_format == "json"
    assert load_serve_config(None, {"access_log_format": "text"}).access_log_format == "text"
    with pytest.raises(UserError, match="access_log_format"):
        load_serve_config(None, {"access_log_format": "xml"})
    r = CliRunner().invoke(command, ["/nonexistent", "--access-log-format", "xml"])
    assert r.exit_code == 2 and "'xml' is not one of 'json', 'text'" in r.output
