"""tritonclient.http and raw HTTP against the KServe v2 / Triton generate endpoints."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from trtserve import SamplingParams


@pytest.fixture(scope="module")
def client(server):
    c = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    yield c
    c.close()


def _greedy(offline, prompt: str, n: int) -> str:
    return offline.generate(prompt, SamplingParams(max_tokens=n, temperature=0.0))[0].text


def test_health_and_metadata(client, model_name):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(model_name) and client.is_model_ready(model_name, "1")
    assert not client.is_model_ready("other")
    meta = client.get_model_metadata(model_name)
    assert meta["name"] == model_name and meta["versions"] == ["1"]
    assert {"name": "text_input", "datatype": "BYTES", "shape": [-1]} in meta["inputs"]
    assert meta["outputs"][0]["name"] == "text_output"
    cfg = client.get_model_config(model_name)
    assert cfg["input"][0] == {"name": "text_input", "data_type": "TYPE_STRING", "dims": [-1], "optional": False}
    server = client.get_server_metadata()
    assert "binary_tensor_data" in server["extensions"] and "generate" in server["extensions"]


@pytest.mark.parametrize("binary", [True, False])
def test_infer_equals_offline(client, model_name, offline, binary):
    prompts = np.array([[b"The quick brown fox"], [b"Paged attention"]], dtype=object)
    text = triton.InferInput("text_input", list(prompts.shape), "BYTES")
    text.set_data_from_numpy(prompts, binary_data=binary)
    mt = triton.InferInput("max_tokens", [1], "INT32")
    mt.set_data_from_numpy(np.array([6], dtype=np.int32), binary_data=binary)
    ex = triton.InferInput("exclude_input_in_output", [1], "BOOL")
    ex.set_data_from_numpy(np.array([True]), binary_data=binary)
    res = client.infer(
        model_name, [text, mt, ex], outputs=[triton.InferRequestedOutput("text_output", binary_data=binary)]
    )
    out = res.as_numpy("text_output")
    assert out.shape == (2, 1)
    texts = [v.decode() if isinstance(v, bytes) else v for v in out.reshape(-1)]  # JSON outputs come back as str
    assert texts == [_greedy(offline, "The quick brown fox", 6), _greedy(offline, "Paged attention", 6)]


def test_infer_includes_input_by_default_and_logprobs(client, model_name, offline):
    text = triton.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"hello"], dtype=object))
    mt = triton.InferInput("max_tokens", [1], "INT32")
    mt.set_data_from_numpy(np.array([4], dtype=np.int32))
    lp = triton.InferInput("return_log_probs", [1], "BOOL")
    lp.set_data_from_numpy(np.array([True]))
    res = client.infer(model_name, [text, mt, lp])  # no outputs listed: all come back as binary
    assert res.as_numpy("text_output")[0].decode() == "hello" + _greedy(offline, "hello", 4)
    assert res.as_numpy("output_log_probs").shape == (1, 4)
    assert np.isclose(res.as_numpy("cum_log_probs")[0], res.as_numpy("output_log_probs").sum(), atol=1e-4)


def test_infer_errors(client, model_name, server):
    bad = triton.InferInput("max_tokens", [1], "INT32")
    bad.set_data_from_numpy(np.array([4], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="text_input"):
        client.infer(model_name, [bad])
    text = triton.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"x"], dtype=object))
    unknown = triton.InferInput("wat", [1], "INT32")
    unknown.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="wat: unknown input or parameter"):
        client.infer(model_name, [text, unknown])
    with pytest.raises(InferenceServerException, match="not served here"):
        client.infer("other", [text])
    r = httpx.post(
        f"{server.url}/v2/models/{model_name}/infer",
        json={"inputs": [{"name": "text_input", "shape": [2], "datatype": "BYTES", "data": ["a"]}]},
    )
    assert r.status_code == 400 and r.json() == {"error": "input 'text_input' has 1 elements but shape [2] needs 2"}
    r = httpx.post(
        f"{server.url}/v2/models/{model_name}/infer", content=b"{}", headers={"Inference-Header-Content-Length": "999"}
    )
    assert r.status_code == 400 and "Inference-Header-Content-Length" in r.json()["error"]


def test_generate_and_generate_stream(server, model_name, offline):
    url = f"{server.url}/v2/models/{model_name}"
    body = {"text_input": "The quick brown fox", "max_tokens": 8, "bad_words": "", "stop_words": ""}
    r = httpx.post(f"{url}/generate", json=body)
    assert r.status_code == 200
    out = r.json()
    expected = _greedy(offline, "The quick brown fox", 8)
    assert out["model_name"] == model_name and out["model_version"] == "1"
    assert out["text_output"] == "The quick brown fox" + expected
    r = httpx.post(
        f"{url}/generate",
        json={"text_input": "The quick brown fox", "parameters": {"max_tokens": 8, "exclude_input_in_output": True}},
    )
    assert r.json()["text_output"] == expected
    with httpx.stream("POST", f"{url}/generate_stream", json={**body, "exclude_input_in_output": True}) as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
    assert "".join(e["text_output"] for e in events) == expected
    assert events[-1]["finish_reason"] == "length"


def test_generate_stream_ends_with_the_metrics_asked_for(server, model_name):
    """return_metrics: one more event after the last token's, with the request's timings (docs/observability.md)."""
    body = {"text_input": "The quick brown fox", "max_tokens": 5, "end_id": -1, "id": "m1", "return_metrics": True}
    with httpx.stream("POST", f"{server.url}/v2/models/{model_name}/generate_stream", json=body) as s:
        events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
    *tokens, last = events
    assert tokens[-1]["finish_reason"] == "length" and all("metrics" not in e for e in tokens)
    assert last["text_output"] == "" and last["id"] == "m1" and "finish_reason" not in last
    m = last["metrics"]
    assert m["completion_tokens"] == 5 and m["e2e_latency"] >= m["time_to_first_token"] > 0
    assert m["prompt_tokens"] > 0 and m["generation_time"] > 0


def test_generate_sampling_and_words(server, model_name, offline):
    url = f"{server.url}/v2/models/{model_name}/generate"
    full = _greedy(offline, "The model", 20)
    stop = full[4:7]
    r = httpx.post(
        url, json={"text_input": "The model", "max_tokens": 20, "stop_words": [stop], "exclude_input_in_output": True}
    )
    assert r.json()["text_output"] == full[: full.index(stop)]
    tok = offline.tokenizer
    for prompt in ("The model", "A cache", "Requests join", "Hello", "The quick"):
        first = offline.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0))[0].token_ids
        word = tok.decode(first)
        if tok.encode(word, add_special_tokens=False) == first:  # a token that round-trips as text
            break
    else:
        pytest.fail("no prompt whose first token is plain text")
    banned = httpx.post(
        url, json={"text_input": prompt, "max_tokens": 1, "bad_words": [word], "exclude_input_in_output": True}
    )
    assert banned.status_code == 200 and banned.json()["text_output"] != word
    seeded = [
        httpx.post(url, json={"text_input": "x", "max_tokens": 8, "top_k": 40, "temperature": 1.0, "seed": 5}).json()[
            "text_output"
        ]
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]


def test_generate_errors(server, model_name):
    url = f"{server.url}/v2/models/{model_name}"
    for body, fragment in (
        ({"max_tokens": 4}, "text_input"),
        ({"text_input": "x", "max_tokens": 0}, "max_tokens"),
        ({"text_input": "x", "beam_width": 4}, "beam_width"),
        ({"text_input": "x", "foo": 1}, "foo"),
    ):
        r = httpx.post(f"{url}/generate", json=body)
        assert r.status_code == 400 and fragment in r.json()["error"], r.text
    r = httpx.post(f"{url}/generate", content=b"[1,2")
    assert r.status_code == 400 and r.json() == {"error": "the request body is not valid JSON"}
    r = httpx.post(f"{server.url}/v2/models/{model_name}/versions/7/generate", json={"text_input": "x"})
    assert r.status_code == 404 and "no version '7'" in r.json()["error"]
    r = httpx.post(f"{url}/generate", json={"text_input": "x " * 300, "max_tokens": 8})
    assert r.status_code == 400 and "max_seq_len (256)" in r.json()["error"]


def test_health_bodies_follow_the_open_inference_protocol(server, model_name):
    """The KServe SDK reads these bodies; Triton's clients read only the status."""
    with httpx.Client(base_url=server.url, timeout=10) as c:
        live, ready = c.get("/v2/health/live"), c.get("/v2/health/ready")
        assert (live.status_code, live.json()) == (200, {"live": True})
        assert (ready.status_code, ready.json()) == (200, {"ready": True})
        r = c.get(f"/v2/models/{model_name}/ready")
        assert (r.status_code, r.json()) == (200, {"name": model_name, "ready": True})
        r = c.get("/v2/models/other/ready")
        assert r.status_code == 404 and "not served here" in r.json()["error"]


def test_a_server_that_is_not_ready_says_so_in_the_body(tiny_llama_engine, tmp_path):
    from api.conftest import Server

    cfg = tmp_path / "run.yaml"
    cfg.write_text("engine:\n  int8_activations: true\n")  # refused by a float engine: never ready
    s = Server(tiny_llama_engine, "--config", str(cfg), log=tmp_path / "server.log", until_ready=False)
    try:
        ready = httpx.get(f"{s.url}/v2/health/ready", timeout=10)
        assert (ready.status_code, ready.json()) == (400, {"ready": False})
        live = httpx.get(f"{s.url}/v2/health/live", timeout=10)
        assert (live.status_code, live.json()) == (200, {"live": True})
    finally:
        s.stop()


def test_405_says_which_methods_the_path_allows(server, model_name):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        for method, path, allow in (
            ("POST", "/v2/health/ready", "GET"),
            ("GET", f"/v2/models/{model_name}/generate", "POST"),
            ("DELETE", f"/v2/models/{model_name}", "GET"),
            ("PUT", "/v1/files/file-x", "DELETE, GET"),
            ("GET", "/v1/completions", "POST"),
        ):
            r = c.request(method, path)
            assert r.status_code == 405 and r.headers["allow"] == allow, (method, path, r.headers, r.text)
        r = c.post("/v2/health/ready")
        assert r.json() == {"error": "method POST not allowed on /v2/health/ready; use GET"}


def test_min_tokens_over_max_tokens_is_400(client, server, model_name):
    r = httpx.post(
        f"{server.url}/v2/models/{model_name}/generate",
        json={"text_input": "x", "max_tokens": 4, "min_tokens": 10**9},
        timeout=10,
    )
    assert r.status_code == 400
    assert r.json() == {"error": "min_tokens (1000000000) exceeds max_tokens (4); lower min_tokens or raise max_tokens"}
    inputs = []
    for name, value, dtype in (("text_input", b"x", "BYTES"), ("max_tokens", 2, "INT32"), ("min_tokens", 3, "INT32")):
        t = triton.InferInput(name, [1], dtype)
        t.set_data_from_numpy(np.array([value], dtype=object if dtype == "BYTES" else np.int32))
        inputs.append(t)
    with pytest.raises(InferenceServerException, match=r"min_tokens \(3\) exceeds max_tokens \(2\)"):
        client.infer(model_name, inputs)


@pytest.mark.parametrize("binary", [False, True])
def test_an_input_whose_datatype_is_not_the_models_is_400(client, server, model_name, binary):
    """Triton refuses a datatype other than the model's metadata; text_input as FP64 was stringified."""
    text = triton.InferInput("text_input", [1], "FP64")
    text.set_data_from_numpy(np.array([1.5]), binary_data=binary)
    with pytest.raises(InferenceServerException) as e:
        client.infer(model_name, [text])
    assert f"inference input 'text_input' data-type is 'FP64', but model '{model_name}' expects 'BYTES'" in str(e.value)
    good = triton.InferInput("text_input", [1], "BYTES")
    good.set_data_from_numpy(np.array([b"x"], dtype=object), binary_data=binary)
    wide = triton.InferInput("max_tokens", [1], "INT64")
    wide.set_data_from_numpy(np.array([2], dtype=np.int64), binary_data=binary)
    with pytest.raises(
        InferenceServerException, match="'max_tokens' data-type is 'INT64', but model .* expects 'INT32'"
    ):
        client.infer(model_name, [good, wide])


def test_server_metadata_and_health_carry_utilisation(client, server, model_name):
    """serve/telemetry/utilisation.py's snapshot beside Triton's fields on GET /v2, and on /health."""
    meta = client.get_server_metadata()
    assert meta["name"] == "trtserve" and "generate" in meta["extensions"]
    u = meta["utilisation"]
    assert u["process"]["resident_memory_bytes"] > 0 and u["process"]["threads"] >= 1
    assert {"model": model_name, "version": "1"}.items() <= u["engines"][0].items()
    health = httpx.get(f"{server.url}/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["utilisation"]["process"]["cpu_seconds"] > 0
