"""OpenTelemetry traces from a live `trtserve run --otlp-traces-endpoint` to an OTLP/gRPC receiver started
here (opentelemetry-proto's TraceService): a chat, a stream, a KServe generate, a gRPC stream and pooling
calls each continue the caller's `traceparent` as the span tree docs/observability.md draws, with the GenAI
attributes and the detokenize, reply-parse and pooling spans;
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
    # greedy past EOS: sampled, the tiny model's first token was now and then EOS (1 completion token, not 2)
    body = {"model": model_name, "prompt": "Hi", "max_tokens": 2, "temperature": 0, "ignore_eos": True}
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


@pytest.fixture(scope="module")
def chunked_server(tiny_llama_engine, tmp_path_factory, collector):
    """A traced server that prefills in chunks of 16 tokens and speculates by prompt lookup."""
    tmp = tmp_path_factory.mktemp("chunked")
    config = tmp / "run.yaml"
    # a fixed batch limit and no acceptance floor: every step with proposals verifies them, whatever the measured
    # switch would decide on a loaded machine (it skipped the second request's verifications once)
    config.write_text(
        "engine:\n  max_num_tokens: 16\n  speculative:\n    method: ngram\n    max_batch_size: 8\n"
        "    min_acceptance: 0.0\n"
    )
    env = {"OTEL_SERVICE_NAME": "trtserve-under-test", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    s = Server(
        tiny_llama_engine,
        "--config",
        str(config),
        "--kv-cache-memory",
        "64MiB",
        "--otlp-traces-endpoint",
        f"http://127.0.0.1:{collector.port}",
        env=env,
        log=tmp / "chunked.log",
    )
    yield s
    s.stop()


def test_chunks_verifications_and_the_grammar_compile_are_spans(chunked_server, collector, model_name):
    """An 81-token prompt prefilled over several steps of 16, a regex compiled, and prompt lookup's
    verifications: spans under the request's prefill, generation and decode (docs/observability.md). The same
    request again finds its grammar and most of its prompt cached."""
    body = {"model": model_name, "prompt": "ab " * 40, "max_tokens": 12, "temperature": 0, "guided_regex": "(ab )+c"}
    gen = f"text_completion {model_name}"
    for n, again in ((6, False), (7, True)):
        trace_id, parent = _traceparent(n)
        r = httpx.post(f"{chunked_server.url}/v1/completions", json=body, headers={"traceparent": parent}, timeout=60)
        assert r.status_code == 200, r.text
        want = {"POST /v1/completions", gen, "prefill", "decode", "prefill chunk", "grammar compile"}
        want.add("speculative verification")
        spans = tree(collector, trace_id, want)
        (server,), (g,), (prefill,), (decode,) = (spans[k] for k in ("POST /v1/completions", gen, "prefill", "decode"))
        assert server.parent_span_id.hex() == PARENT and g.parent_span_id == server.span_id
        (grammar,) = spans["grammar compile"]
        assert grammar.parent_span_id == g.span_id
        assert attrs(grammar) == {"trtserve.grammar.kind": "regex", "trtserve.grammar.cache_hit": again}
        chunks = [attrs(c) for c in sorted(spans["prefill chunk"], key=lambda c: c.start_time_unix_nano)]
        assert all(c.parent_span_id == prefill.span_id for c in spans["prefill chunk"])
        assert [c["trtserve.prefill.chunk"] for c in chunks] == list(range(len(chunks)))
        assert all(c["trtserve.prefill.tokens"] <= 16 for c in chunks)
        cached = chunks[0]["trtserve.cached_tokens"]
        assert sum(c["trtserve.prefill.tokens"] for c in chunks) == r.json()["usage"]["prompt_tokens"] - cached
        assert (cached > 0) if again else (cached == 0 and len(chunks) >= 5)
        assert grammar.end_time_unix_nano <= min(c.start_time_unix_nano for c in spans["prefill chunk"])
        (verify,) = spans["speculative verification"]
        a = attrs(verify)
        assert verify.parent_span_id == decode.span_id and a["trtserve.spec.verifications"] == len(verify.events) > 0
        accepted = [attrs(e)["trtserve.spec.accepted"] for e in verify.events]
        assert {e.name for e in verify.events} == {"verified"} and sum(accepted) == a["trtserve.spec.accepted_tokens"]


def _events(r) -> list[dict]:
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def test_a_streamed_chat_has_one_detokenize_and_one_reply_parse_span(tserver, collector, model_name):
    """Detokenization and the stream's writes: one span under the generation with its token and chunk
    counts; the tool-call parser's split: one span under the request with the parser and its counts."""
    trace_id, parent = _traceparent(8)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    body = {
        "model": model_name,
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": 5,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "tools": [tool],
    }
    url = f"{tserver.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers={"traceparent": parent}, timeout=60) as r:
        assert r.status_code == 200
        chunks = [e for e in _events(r) if e["choices"]][1:]  # after the role's
    gen_name = f"chat {model_name}"
    spans = tree(collector, trace_id, {"POST /v1/chat/completions", gen_name, "decode", "detokenize", "reply parse"})
    (server,), (gen,), (decode,) = spans["POST /v1/chat/completions"], spans[gen_name], spans["decode"]
    (detok,), (parse,) = spans["detokenize"], spans["reply parse"]
    assert detok.parent_span_id == gen.span_id and parse.parent_span_id == server.span_id
    assert detok.start_time_unix_nano == decode.start_time_unix_nano
    assert detok.end_time_unix_nano == gen.end_time_unix_nano
    d = attrs(detok)
    assert d["trtserve.detokenize.tokens"] == 5 and d["trtserve.detokenize.chunks"] == len(chunks)
    assert d["trtserve.detokenize.busy_s"] > 0 and d["trtserve.stream.write_s"] > 0
    p = attrs(parse)
    assert p["trtserve.parse.tool_parser"] == "hermes" and p["trtserve.parse.reasoning_parser"] == "none"
    assert p["trtserve.parse.pieces"] == len(chunks) and p["trtserve.parse.tool_calls"] == 0
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert p["trtserve.parse.content_chars"] == len(content)
    assert server.start_time_unix_nano <= parse.start_time_unix_nano <= parse.end_time_unix_nano
    assert parse.end_time_unix_nano <= server.end_time_unix_nano


@pytest.fixture(scope="module")
def pooling_server(tmp_path_factory, collector):
    """A traced repository serving a tiny Qwen3 embedder (docs/pooling.md)."""
    import torch
    from helpers import POOLING_SHAPE, write_tokenizer
    from transformers import AutoConfig, AutoModel

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    tmp = tmp_path_factory.mktemp("pooling-traced")
    torch.manual_seed(1)
    config = AutoConfig.for_model("qwen3", **(POOLING_SHAPE | {"num_key_value_heads": 1, "head_dim": 32}))
    AutoModel.from_config(config, dtype=torch.float32).eval().save_pretrained(tmp / "src")
    write_tokenizer(tmp / "src")
    build_engine(BuildConfig(model=str(tmp / "src"), tokens_per_block=16), tmp / "repo" / "embedder" / "1", quiet=True)
    env = {"OTEL_SERVICE_NAME": "trtserve-under-test", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    endpoint = f"http://127.0.0.1:{collector.port}"
    s = Server(
        tmp / "repo", "--kv-cache-memory", "64MiB", "--otlp-traces-endpoint", endpoint, env=env, log=tmp / "s.log"
    )
    yield s
    s.stop()


def test_pooling_calls_have_their_own_span(pooling_server, collector):
    """/v1/embeddings, /v1/score and a refused /classify: one span each under the server span, with the task,
    the documents and the tokens; the refusal's is an error."""
    url = pooling_server.url
    calls = [
        ("/v1/embeddings", {"model": "embedder", "input": ["a fox", "a dog", "a cat"]}, 200, "embeddings", "embed", 3),
        ("/v1/score", {"model": "embedder", "text_1": "a fox", "text_2": ["a dog", "a cat"]}, 200, "score", "score", 2),
        ("/classify", {"model": "embedder", "input": ["a fox"]}, 400, "classify", "classify", 1),
    ]
    for n, (path, body, status, operation, task, documents) in enumerate(calls, start=20):
        trace_id, parent = _traceparent(n)
        r = httpx.post(f"{url}{path}", json=body, headers={"traceparent": parent}, timeout=60)
        assert r.status_code == status, r.text
        name = f"{operation} embedder"
        spans = tree(collector, trace_id, {f"POST {path}", name})
        (server,), (call,) = spans[f"POST {path}"], spans[name]
        assert call.kind == INTERNAL and call.parent_span_id == server.span_id
        a = attrs(call)
        assert a["trtserve.pooling.task"] == task and a["trtserve.pooling.documents"] == documents
        assert a["gen_ai.operation.name"] == operation and a["gen_ai.request.model"] == "embedder"
        assert a["trtserve.model_version"] == "1"
        if status == 200:
            assert a["gen_ai.usage.input_tokens"] == r.json()["usage"]["prompt_tokens"] > 0
            assert call.status.code != 2  # STATUS_CODE_ERROR
        else:
            assert call.status.code == 2 and "needs a classifier" in a["error.type"]
