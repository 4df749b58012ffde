"""OpenTelemetry traces from a live `trtserve run --otlp-traces-endpoint` to an OTLP/gRPC receiver started
here (opentelemetry-proto's TraceService): a chat, a stream, a KServe generate and a gRPC stream each
continue the caller's `traceparent` as the span tree docs/tracing.md draws, with the GenAI attributes;
`return_metrics` returns timings equal to what the Prometheus histograms observed for the same request."""

from __future__ import annotations

import json
import queue
import socket
import time
from concurrent import futures

import grpc
import httpx
import numpy as np
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

import tritonclient.grpc as grpcclient  # noqa: E402
from conftest import Server  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc  # noqa: E402

pytestmark = pytest.mark.timeout(300)  # every test here talks to a server
PARENT = "00f067aa0ba902b7"
SERVER, INTERNAL = 2, 1  # opentelemetry.proto.trace.v1.Span.SpanKind


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC receiver: keeps every span it is sent, with its attributes decoded."""

    def __init__(self):
        self.spans: queue.Queue = queue.Queue()

    def Export(self, request, context):
        for rs in request.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.put((service, s))
        return trace_service_pb2.ExportTraceServiceResponse()


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


def attrs(span) -> dict:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture(scope="module")
def collector():
    c = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(c, server)
    c.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    c.seen = []  # (service, span) received so far, across tests
    yield c
    server.stop(grace=None)


@pytest.fixture(scope="module")
def tserver(tiny_llama_engine, tmp_path_factory, collector):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        grpc_port = s.getsockname()[1]
    env = {
        "OTEL_SERVICE_NAME": "trtserve-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # milliseconds between batch exports
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
    }
    s = Server(
        tiny_llama_engine,
        "--kv-cache-memory",
        "64MiB",
        "--grpc-port",
        str(grpc_port),
        "--otlp-traces-endpoint",
        f"http://127.0.0.1:{collector.port}",
        env=env,
        log=tmp_path_factory.mktemp("logs") / "traced.log",
    )
    s.grpc = f"127.0.0.1:{grpc_port}"
    yield s
    s.stop()


def tree(collector: Collector, trace_id: str, want: set[str], timeout: float = 20) -> dict[str, list]:
    """name -> spans of trace `trace_id`, once every name in `want` has arrived."""
    deadline = time.time() + timeout
    while True:
        while not collector.spans.empty():
            collector.seen.append(collector.spans.get())
        found: dict[str, list] = {}
        for service, s in collector.seen:
            if s.trace_id.hex() == trace_id:
                assert service == "trtserve-under-test"
                found.setdefault(s.name, []).append(s)
        if want <= found.keys():
            return found
        if time.time() > deadline:
            raise AssertionError(f"trace {trace_id} has {sorted(found)}, not all of {sorted(want)}")
        time.sleep(0.05)


def _traceparent(n: int) -> tuple[str, str]:
    trace_id = f"{n:032x}"
    return trace_id, f"00-{trace_id}-{PARENT}-01"


def _check_generation(spans: dict, server_name: str, gen_name: str, model: str, max_tokens: int) -> dict:
    (server,) = spans[server_name]
    assert server.kind == SERVER and server.parent_span_id.hex() == PARENT
    (gen,) = spans[gen_name]
    assert gen.kind == INTERNAL and gen.parent_span_id == server.span_id
    for name in ("admission", "queue", "prefill", "decode"):
        (child,) = spans[name]
        assert child.parent_span_id == gen.span_id
        assert gen.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
        assert child.end_time_unix_nano <= gen.end_time_unix_nano <= server.end_time_unix_nano
    assert spans["queue"][0].end_time_unix_nano == spans["prefill"][0].start_time_unix_nano
    assert spans["prefill"][0].end_time_unix_nano == spans["decode"][0].start_time_unix_nano
    a = attrs(gen)
    assert a["gen_ai.request.model"] == model and a["gen_ai.request.max_tokens"] == max_tokens
    assert a["gen_ai.usage.output_tokens"] == max_tokens and a["gen_ai.usage.input_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["length"] and a["trtserve.model_version"] == "1"
    assert a["gen_ai.response.id"].startswith("rcpt-")
    return a


def test_chat_continues_the_callers_trace(tserver, collector, model_name):
    trace_id, parent = _traceparent(1)
    body = {
        "model": model_name,
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": 5,
        "temperature": 0,
        "ignore_eos": True,
        "return_metrics": True,
    }
    r = httpx.post(f"{tserver.url}/v1/chat/completions", json=body, headers={"traceparent": parent}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-trace-id"] == trace_id and r.headers["traceresponse"].startswith(f"00-{trace_id}-")
    spans = tree(collector, trace_id, {"POST /v1/chat/completions", f"chat {model_name}", "decode"})
    a = _check_generation(spans, "POST /v1/chat/completions", f"chat {model_name}", model_name, 5)
    assert a["gen_ai.operation.name"] == "chat" and a["trtserve.protocol"] == "http"
    server = attrs(spans["POST /v1/chat/completions"][0])
    assert server["http.response.status_code"] == 200 and server["http.route"] == "/v1/chat/completions"
    m = r.json()["usage"]["metrics"]
    assert m["completion_tokens"] == 5 and m["prompt_tokens"] == a["gen_ai.usage.input_tokens"]
    assert m["queue_time"] == pytest.approx(a["trtserve.queue_time_s"])
    assert m["time_to_first_token"] == pytest.approx(a["trtserve.time_to_first_token_s"])


def _histogram_sum(server: Server, name: str, protocol: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    lines = [ln for ln in text.splitlines() if ln.startswith(name + "_sum{") and f'protocol="{protocol}"' in ln]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


def test_stream_metrics_equal_the_histograms(tserver, collector, model_name):
    """The final usage chunk's timings are what trtserve_time_to_first_token_seconds and the queue and
    end-to-end histograms observed for this request (nothing else runs meanwhile)."""
    names = {
        "time_to_first_token": "trtserve_time_to_first_token_seconds",
        "queue_time": "trtserve_request_queue_time_seconds",
        "e2e_latency": "trtserve_e2e_request_latency_seconds",
    }
    before = {k: _histogram_sum(tserver, n, "http") for k, n in names.items()}
    trace_id, parent = _traceparent(2)
    body = {
        "model": model_name,
        "prompt": "Once upon a time",
        "max_tokens": 6,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_metrics": True,
    }
    usage = None
    with httpx.stream(
        "POST", f"{tserver.url}/v1/completions", json=body, headers={"traceparent": parent}, timeout=60
    ) as r:
        assert r.status_code == 200 and r.headers["x-trace-id"] == trace_id
        for line in r.iter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    m = usage["metrics"]
    after = {k: _histogram_sum(tserver, n, "http") for k, n in names.items()}
    for key in names:
        assert after[key] - before[key] == pytest.approx(m[key], abs=1e-6), key
    assert m["prefill_time"] + m["queue_time"] <= m["time_to_first_token"] + 1e-6
    assert m["generation_time"] > 0 and m["mean_inter_token_latency"] == pytest.approx(m["generation_time"] / 5)
    spans = tree(collector, trace_id, {"POST /v1/completions", f"text_completion {model_name}", "decode"})
    _check_generation(spans, "POST /v1/completions", f"text_completion {model_name}", model_name, 6)


def test_kserve_generate(tserver, collector, model_name):
    trace_id, parent = _traceparent(3)
    body = {"text_input": "Hello", "max_tokens": 4, "end_id": -1, "return_metrics": True}
    r = httpx.post(
        f"{tserver.url}/v2/models/{model_name}/generate", json=body, headers={"traceparent": parent}, timeout=60
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-trace-id"] == trace_id and r.json()["metrics"]["completion_tokens"] == 4
    route = "POST /v2/models/{model}/generate"
    spans = tree(collector, trace_id, {route, f"text_completion {model_name}", "decode"})
    _check_generation(spans, route, f"text_completion {model_name}", model_name, 4)


def test_grpc_stream_continues_the_trace_in_its_metadata(tserver, collector, model_name):
    trace_id, parent = _traceparent(4)
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"Hello"]], dtype=object))
    inputs = [text]
    for name, value, kind, dtype in (("max_tokens", 3, "INT32", np.int32), ("stream", True, "BOOL", np.bool_)):
        t = grpcclient.InferInput(name, [1, 1], kind)
        t.set_data_from_numpy(np.array([[value]], dtype=dtype))
        inputs.append(t)
    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(tserver.grpc)
    c.start_stream(
        callback=lambda result, error: results.put((result, error)), stream_timeout=60, headers={"traceparent": parent}
    )
    c.async_stream_infer(model_name, inputs, request_id="traced")
    c.stop_stream()
    c.close()
    got = []
    while not results.empty():
        result, error = results.get()
        assert error is None, error
        got.append(result)
    assert len(got) == 3
    name = "inference.GRPCInferenceService/ModelStreamInfer"
    spans = tree(collector, trace_id, {name, f"text_completion {model_name}", "decode"})
    a = _check_generation(spans, name, f"text_completion {model_name}", model_name, 3)
    assert a["trtserve.protocol"] == "grpc"
    assert attrs(spans[name][0])["rpc.grpc.status_code"] == "OK"


def test_no_traceparent_starts_a_trace_and_the_access_log_names_it(tserver, collector, model_name):
    body = {"model": model_name, "prompt": "Hi", "max_tokens": 2}
    r = httpx.post(f"{tserver.url}/v1/completions", json=body, timeout=60)
    trace_id = r.headers["x-trace-id"]
    spans = tree(collector, trace_id, {"POST /v1/completions", "decode"})
    assert not spans["POST /v1/completions"][0].parent_span_id  # a root span
    deadline = time.time() + 10
    while time.time() < deadline:
        log = tserver.log.read_text().splitlines()
        lines = [json.loads(ln.split("trtserve.access: ", 1)[1]) for ln in log if f'"trace_id": "{trace_id}"' in ln]
        if lines:
            break
        time.sleep(0.05)
    (line,) = lines
    assert line["path"] == "/v1/completions" and line["completion_tokens"] == 2 and "queue_ms" in line
    # probes and scrapes are not traced
    before = len(collector.seen) + collector.spans.qsize()
    httpx.get(f"{tserver.url}/v2/health/ready", timeout=10)
    httpx.get(f"{tserver.url}/metrics", timeout=10)
    time.sleep(0.5)
    assert len(collector.seen) + collector.spans.qsize() == before


def test_responses_return_metrics(tserver, collector, model_name):
    trace_id, parent = _traceparent(5)
    body = {"model": model_name, "input": "Hello", "max_output_tokens": 3, "return_metrics": True, "store": False}
    r = httpx.post(f"{tserver.url}/v1/responses", json=body, headers={"traceparent": parent}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-trace-id"] == trace_id
    m = r.json()["usage"]["metrics"]
    assert m["completion_tokens"] == r.json()["usage"]["output_tokens"] and m["e2e_latency"] > 0
    spans = tree(collector, trace_id, {"POST /v1/responses", f"chat {model_name}"})
    assert attrs(spans[f"chat {model_name}"][0])["gen_ai.operation.name"] == "chat"
