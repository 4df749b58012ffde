"""The official tritonclient.grpc clients (sync, aio, start_stream / async_stream_infer) against a
live `trtserve run --grpc-port`: greedy text equals HTTP generate's, many requests share a stream,
cancel frees the KV cache, and errors, auth, admission and drain behave as on HTTP."""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import socket
import subprocess
import sys
import time

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from conftest import Server
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)  # every test here talks to a server
LONG = 240  # tokens; a short prompt plus this stays within the tiny engine's max_seq_len of 256
NOT_FOUND = "Request for unknown model: 'other' is not found"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(engine, log, *args: str, env: dict | None = None) -> Server:
    port = _free_port()
    s = Server(engine, "--grpc-port", str(port), *args, env=env, log=log)
    s.grpc = f"127.0.0.1:{port}"
    return s


@pytest.fixture(scope="module")
def gserver(tiny_llama_engine, tmp_path_factory):
    s = _start(tiny_llama_engine, tmp_path_factory.mktemp("logs") / "grpc.log", "--kv-cache-memory", "64MiB")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(gserver):
    c = grpcclient.InferenceServerClient(gserver.grpc)
    yield c
    c.close()


def _inputs(prompts: list[str], max_tokens: int, mod=grpcclient, **extra) -> list:
    """The TensorRT-LLM ensemble's tensors: text_input [batch, 1] BYTES, scalars as [1, 1]."""
    text = mod.InferInput("text_input", [len(prompts), 1], "BYTES")
    text.set_data_from_numpy(np.array([[p.encode()] for p in prompts], dtype=object))
    out = [text]
    for name, value in {"max_tokens": max_tokens, "exclude_input_in_output": True, **extra}.items():
        kind, dtype = ("BOOL", np.bool_) if isinstance(value, bool) else ("INT32", np.int32)
        t = mod.InferInput(name, [1, 1], kind)
        t.set_data_from_numpy(np.array([[value]], dtype=dtype))
        out.append(t)
    return out


def _generate(server, model: str, prompt: str, n: int) -> str:
    """What HTTP generate answers, greedy and without the prompt: the reference for every gRPC path."""
    body = {"text_input": prompt, "max_tokens": n, "exclude_input_in_output": True, "end_id": -1}
    return httpx.post(f"{server.url}/v2/models/{model}/generate", json=body, timeout=60).json()["text_output"]


def _status(excinfo) -> str:
    return excinfo.value.status()


def _final(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def _text(result) -> str:
    out = result.as_numpy("text_output")
    return "" if out is None else out.reshape(-1)[0].decode()


def test_health_metadata_config_and_repository(client, model_name):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(model_name) and client.is_model_ready(model_name, "1")
    assert not client.is_model_ready("other")
    assert "generate" in client.get_server_metadata().extensions
    meta = client.get_model_metadata(model_name)
    assert meta.name == model_name and list(meta.versions) == ["1"] and meta.inputs[0].name == "text_input"
    cfg = client.get_model_config(model_name).config
    assert cfg.model_transaction_policy.decoupled and cfg.input[0].data_type == model_config_pb2.TYPE_STRING
    for call in (lambda: client.get_model_metadata("other"), lambda: client.get_model_config("other")):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert _status(e) == "StatusCode.NOT_FOUND" and e.value.message().startswith(NOT_FOUND)
    with pytest.raises(InferenceServerException, match=f"'{model_name}' version 7 is not found"):
        client.get_model_config(model_name, "7")
    index = client.get_model_repository_index().models
    assert [(m.name, m.state) for m in index] == [(model_name, "READY")]
    client.load_model(model_name)  # already loaded: nothing to do
    with pytest.raises(InferenceServerException) as e:
        client.unload_model(model_name)
    assert _status(e) == "StatusCode.UNIMPLEMENTED" and "stop the server" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.get_system_shared_memory_status()
    assert _status(e) == "StatusCode.UNIMPLEMENTED"


def test_infer_equals_http_generate(client, gserver, model_name):
    prompts = ["The quick brown fox", "Paged attention"]
    before = client.get_inference_statistics(model_name).model_stats[0].inference_count
    res = client.infer(model_name, _inputs(prompts, 6, end_id=-1), request_id="#1 ünï/côde", client_timeout=60)
    assert res.get_response().id == "#1 ünï/côde"  # echoed as sent, never parsed
    out = res.as_numpy("text_output")
    assert out.shape == (2, 1)
    assert [v.decode() for v in out.reshape(-1)] == [_generate(gserver, model_name, p, 6) for p in prompts]
    stats = client.get_inference_statistics(model_name).model_stats[0]
    assert stats.inference_count >= before + 2 and stats.inference_stats.success.ns > 0

    # Typed contents instead of raw_input_contents, through the generated stub itself.
    req = service_pb2.ModelInferRequest(model_name=model_name, id="typed")
    text = req.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    text.contents.bytes_contents.append(b"Paged attention")
    req.inputs.add(name="max_tokens", datatype="INT32", shape=[1]).contents.int_contents.append(6)
    req.inputs.add(name="end_id", datatype="INT32", shape=[1]).contents.int_contents.append(-1)
    req.inputs.add(name="exclude_input_in_output", datatype="BOOL", shape=[1]).contents.bool_contents.append(True)
    with grpc.insecure_channel(gserver.grpc) as channel:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(req, timeout=60)
    assert resp.id == "typed" and resp.outputs[0].name == "text_output"
    assert resp.raw_output_contents[0][4:].decode() == _generate(gserver, model_name, "Paged attention", 6)


def test_sixteen_requests_share_one_stream(client, gserver, model_name):
    prompts = {f"req-{i}": (f"prompt number {i}", 4 + i) for i in range(16)}  # different lengths interleave
    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(gserver.grpc)
    c.start_stream(callback=lambda result, error: results.put((result, error)), stream_timeout=120)
    for rid, (prompt, n) in prompts.items():
        c.async_stream_infer(model_name, _inputs([prompt], n, stream=True, end_id=-1), request_id=rid)
    c.async_stream_infer(
        model_name, _inputs(["empty final"], 3, stream=True), request_id="ef", enable_empty_final_response=True
    )
    c.stop_stream()  # half-close: the server still finishes every request it accepted
    c.close()
    got: dict[str, list] = {}
    while not results.empty():
        result, error = results.get()
        assert error is None, error
        got.setdefault(result.get_response().id, []).append(result)
    for rid, (prompt, n) in prompts.items():
        pieces = got[rid]
        assert len(pieces) == n  # one response per token, in order
        assert [_final(r) for r in pieces] == [False] * (n - 1) + [True]
        assert "".join(_text(r) for r in pieces) == _generate(gserver, model_name, prompt, n)
    empty = got["ef"]
    assert [_final(r) for r in empty][-2:] == [False, True] and empty[-1].as_numpy("text_output") is None


def test_aio_client_infer_and_stream_infer(gserver, model_name):
    async def main():
        async with aioclient.InferenceServerClient(gserver.grpc) as c:
            res = await c.infer(model_name, _inputs(["Hello there"], 5, aioclient, end_id=-1), client_timeout=60)

            async def requests():
                for i in range(3):
                    yield {
                        "model_name": model_name,
                        "inputs": _inputs([f"aio {i}"], 5, aioclient, stream=True, end_id=-1),
                        "request_id": f"a{i}",
                    }

            pieces: dict[str, str] = {}
            async for result, error in c.stream_infer(requests(), stream_timeout=120):
                assert error is None, error
                rid = result.get_response().id
                pieces[rid] = pieces.get(rid, "") + _text(result)
            return res.as_numpy("text_output").reshape(-1)[0].decode(), pieces

    text, pieces = asyncio.run(main())
    assert text == _generate(gserver, model_name, "Hello there", 5)
    assert pieces == {f"a{i}": _generate(gserver, model_name, f"aio {i}", 5) for i in range(3)}


def test_cancel_deadline_and_timeout_free_every_kv_block(client, gserver, model_name):
    before = gserver.metric("trtserve_generation_tokens_total")
    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(gserver.grpc)
    c.start_stream(callback=lambda result, error: results.put((result, error)), stream_timeout=120)
    for i in range(4):
        c.async_stream_infer(model_name, _inputs([f"long {i}"], LONG, stream=True, end_id=-1), request_id=f"l{i}")
    results.get(timeout=60)  # generation has started
    c.stop_stream(cancel_requests=True)
    c.close()
    gserver.wait_idle(timeout=10)
    assert gserver.metric("trtserve_generation_tokens_total") - before < 4 * LONG / 2  # aborted, not finished

    async def aio_cancel():
        async with aioclient.InferenceServerClient(gserver.grpc) as ac:

            async def one():
                yield {"model_name": model_name, "inputs": _inputs(["x"], LONG, aioclient, stream=True, end_id=-1)}

            it = ac.stream_infer(one())
            async for _ in it:
                it.cancel()
                break

    asyncio.run(aio_cancel())
    gserver.wait_idle(timeout=10)
    for kwargs in ({"client_timeout": 0.05}, {"timeout": 50_000}):  # the gRPC deadline; Triton's timeout in µs
        with pytest.raises(InferenceServerException) as e:
            client.infer(model_name, _inputs(["y"], LONG, end_id=-1), **kwargs)
        assert _status(e) == "StatusCode.DEADLINE_EXCEEDED", e.value
        gserver.wait_idle(timeout=10)


def test_bad_inputs_get_status_codes(client, gserver, model_name):
    mt = _inputs(["x"], 4)[1:]
    wat = grpcclient.InferInput("wat", [1], "INT32")
    wat.set_data_from_numpy(np.array([1], dtype=np.int32))
    for inputs, kwargs, fragment in (
        (mt, {}, "input 'text_input' (BYTES) is required"),
        (_inputs(["x"], 4) + [wat], {}, "wat: unknown input or parameter"),
        (_inputs(["x"], 0), {}, "max_tokens"),
        (_inputs(["x " * 300], 8), {}, "max_seq_len (256)"),
        (_inputs(["x"], 4), {"sequence_id": 3}, "sequence batching is not supported"),
    ):
        with pytest.raises(InferenceServerException) as e:
            client.infer(model_name, inputs, client_timeout=30, **kwargs)
        assert _status(e) == "StatusCode.INVALID_ARGUMENT" and fragment in e.value.message(), e.value
    with pytest.raises(InferenceServerException) as e:
        client.infer("other", _inputs(["x"], 4))
    assert _status(e) == "StatusCode.NOT_FOUND" and e.value.message().startswith(NOT_FOUND)

    # On a stream, a bad request gets an error response and the stream carries on.
    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(gserver.grpc)
    c.start_stream(callback=lambda result, error: results.put((result, error)), stream_timeout=60)
    c.async_stream_infer(model_name, _inputs(["a", "b"], 4, stream=True), request_id="two")
    c.async_stream_infer("other", _inputs(["a"], 4), request_id="lost")
    c.async_stream_infer(model_name, _inputs(["fine"], 3, stream=True, end_id=-1), request_id="ok")
    c.stop_stream()
    c.close()
    items = [results.get_nowait() for _ in range(results.qsize())]
    errors = sorted(str(e) for _, e in items if e is not None)
    assert len(errors) == 2 and NOT_FOUND in errors[0] and "streams one sequence per request" in errors[1]
    assert "".join(_text(r) for r, e in items if e is None) == _generate(gserver, model_name, "fine", 3)


def test_api_key_admission_metrics_and_access_log(tiny_llama_engine, tmp_path, model_name):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("max_queued_requests: 1\nengine:\n  max_batch_size: 1\n  kv_cache_memory: 32MiB\n")
    s = _start(tiny_llama_engine, tmp_path / "busy.log", "--config", str(cfg), env={"TRTSERVE_API_KEY": "s3cret"})
    key = {"authorization": "Bearer s3cret"}
    try:
        c = grpcclient.InferenceServerClient(s.grpc)
        assert c.is_server_ready()  # health needs no key, as on HTTP
        with pytest.raises(InferenceServerException) as e:
            c.infer(model_name, _inputs(["x"], 2))
        assert _status(e) == "StatusCode.UNAUTHENTICATED" and "authorization: Bearer <key>" in e.value.message()
        assert c.infer(model_name, _inputs(["x"], 2), headers=key).as_numpy("text_output").size == 1
        results: queue.Queue = queue.Queue()
        c.start_stream(callback=lambda result, error: results.put(error), stream_timeout=60)  # no key
        try:  # the server refuses the stream as it opens, which may be before this request is sent
            c.async_stream_infer(model_name, _inputs(["x"], 2, stream=True))
        except InferenceServerException as err:
            assert "no longer in valid state" in err.message()
        assert "StatusCode.UNAUTHENTICATED" in str(results.get(timeout=30))
        c.stop_stream()

        async def flood():
            async with aioclient.InferenceServerClient(s.grpc) as ac:
                calls = [ac.infer(model_name, _inputs(["x"], 120, aioclient, end_id=-1), headers=key) for _ in range(4)]
                return await asyncio.gather(*calls, return_exceptions=True)

        outs = asyncio.run(flood())
        codes = sorted("OK" if not isinstance(o, Exception) else o.status() for o in outs)
        assert "OK" in codes and "StatusCode.RESOURCE_EXHAUSTED" in codes, codes
        refused = next(o for o in outs if isinstance(o, Exception))
        assert "queue is full" in refused.message()
        s.wait_idle(headers={"Authorization": "Bearer s3cret"})
        text = httpx.get(f"{s.url}/metrics", headers={"Authorization": "Bearer s3cret"}).text
        assert (
            f'trtserve_grpc_requests_total{{code="RESOURCE_EXHAUSTED",method="ModelInfer",model="{model_name}",version="1"}}'
            in text
        )
        ttft = f'trtserve_time_to_first_token_seconds_count{{frontend="kserve",model="{model_name}",protocol="grpc",version="1"}}'
        assert ttft in text
        c.close()
    finally:
        s.stop()
    lines = [json.loads(x.split("trtserve.access: ", 1)[1]) for x in s.log.read_text().splitlines() if "access: " in x]
    grpc_lines = [x for x in lines if x["path"] == "/inference.GRPCInferenceService/ModelInfer"]
    assert {"UNAUTHENTICATED", "OK", "RESOURCE_EXHAUSTED"} <= {x["status"] for x in grpc_lines}
    assert any(x.get("completion_tokens") == 120 for x in grpc_lines)


def test_sigterm_drains_grpc_then_exits_0(tiny_llama_engine, tmp_path, model_name):
    s = _start(tiny_llama_engine, tmp_path / "drain.log", "--kv-cache-memory", "8MiB")
    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(s.grpc)
    c.start_stream(callback=lambda result, error: results.put((result, error)), stream_timeout=120)
    c.async_stream_infer(model_name, _inputs(["drain"], LONG, stream=True, end_id=-1), request_id="inflight")
    first = results.get(timeout=60)
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while c.is_server_ready() and time.time() < deadline:  # until the server has seen the signal
        time.sleep(0.002)
    with pytest.raises(InferenceServerException) as e:
        grpcclient.InferenceServerClient(s.grpc).infer(model_name, _inputs(["late"], 2))
    assert _status(e) == "StatusCode.UNAVAILABLE" and "shutting down" in e.value.message()
    c.async_stream_infer(model_name, _inputs(["late"], 2, stream=True), request_id="late")
    got = [first]
    while not (got[-1][1] is None and got[-1][0].get_response().id == "inflight" and _final(got[-1][0])):
        got.append(results.get(timeout=60))
    assert sum(1 for r, e in got if e is None and r.get_response().id == "inflight") == LONG  # it finished
    late = [e for _, e in got if e is not None] or [results.get(timeout=30)[1]]
    assert "shutting down" in str(late[0])
    deadline = time.time() + 20
    while s.proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert s.proc.returncode == 0, s.log.read_text()[-1500:]
    c.stop_stream(cancel_requests=True)
    s.stop()


def test_grpc_port_problems_are_one_line(tiny_llama_engine):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for args, fragment in (
            (["--grpc-port", str(port)], f"cannot listen for gRPC on 127.0.0.1:{port}"),
            (["--port", "18555", "--grpc-port", "18555"], "--grpc-port 18555 is also the HTTP port"),
        ):
            r = subprocess.run(
                [sys.executable, "-m", "trtserve.cli", "run", str(tiny_llama_engine), *args],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 2 and r.stderr.startswith("error: ") and fragment in r.stderr, r.stderr
            assert "Traceback" not in r.stderr


def test_bench_grpc_streams_and_infers(gserver, model_name, tiny_llama_engine, tmp_path):
    from trtserve.bench.client import run_benchmark
    from trtserve.bench.stats import summarize
    from trtserve.bench.workload import random_requests

    reqs = random_requests(8, (4, 30), (2, 10), vocab_size=256, seed=9)
    for backend, stream in (("grpc", True), ("grpc", False), ("kserve", False)):
        run = asyncio.run(
            run_benchmark(
                gserver.url,
                backend,
                model_name,
                reqs,
                max_concurrency=3,
                progress=False,
                stream=stream,
                grpc_url=gserver.grpc,
            )
        )
        s = summarize(run)
        assert s["completed"] == len(reqs), s["errors"]
        for r, want in zip(run.results, reqs, strict=True):
            assert r.output_tokens == want.output_len
            assert len(r.itl) == (want.output_len - 1 if stream else 0)  # one response per generated token
        assert run.server_metrics["generation_tokens"] == sum(r.output_len for r in reqs)
    out = tmp_path / "bench.json"
    args = ["--backend", "grpc", "--grpc-url", gserver.grpc, "--base-url", gserver.url, "--model", model_name]
    args += ["-n", "4", "--input-len", "8", "--output-len", "4", "--tokenizer", str(tiny_llama_engine)]
    proc = subprocess.run(
        [sys.executable, "-m", "trtserve.cli", "bench", "--no-progress", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["completed"] == 4 and "Inter-token latency" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "trtserve.cli", "bench", "--backend", "grpc", "--grpc-url", "127.0.0.1:1"]
        + ["--model", "m", "-n", "1", "--tokenizer", str(tiny_llama_engine)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "cannot reach a gRPC server at 127.0.0.1:1" in proc.stderr, proc.stderr
