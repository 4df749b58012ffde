"""A live `trtserve run REPO_DIR` serving tensor models beside an LLM engine dir: tritonclient.http
and tritonclient.grpc, unchanged, against outputs from onnxruntime run in process; every datatype,
JSON and binary tensors, classification with labels, an ensemble in one call, dynamic batching in
the statistics, a full queue (429) and a queue timeout, load / unload, a bad config.pbtxt."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import serving_models as tm
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)
T = 30  # s: every client call's timeout


def _example():
    """examples/tensor-repo/make_repo.py: the worked example (image classifier and embedder ensembles)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "tensor-repo" / "make_repo.py"
    spec = importlib.util.spec_from_file_location("tensor_repo_make_repo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_llama_engine) -> Path:
    root = _example().make_repo(tmp_path_factory.mktemp("tensor-repo"))
    shutil.copytree(tiny_llama_engine, root / "llm" / "1")
    tm.mlp(root)
    tm.every_type(root)
    tm.pipeline(root)
    gates = tmp_path_factory.mktemp("gates")
    tm.gated(root, "bounded", gates / "bounded", "max_queue_size: 1")
    tm.gated(root, "expiring", gates / "expiring", "default_timeout_microseconds: 100000 timeout_action: REJECT")
    tm.broken(root)
    return root


@pytest.fixture(scope="module")
def srv(repo, tmp_path_factory):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        grpc_port = sock.getsockname()[1]
    logs = tmp_path_factory.mktemp("logs")
    s = Server(repo, "--kv-cache-memory", "64MiB", "--grpc-port", str(grpc_port), log=logs / "tensor.log")
    s.grpc = f"127.0.0.1:{grpc_port}"
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(srv):
    client = httpclient.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=T, concurrency=64)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(srv):
    client = grpcclient.InferenceServerClient(srv.grpc)
    yield client
    client.close()


@pytest.fixture(scope="module")
def session(repo):
    return ort.InferenceSession(str(repo / "mlp" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


def _x(rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, tm.FEATURES)).astype(np.float32)


def _http_input(name: str, arr: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    inp = httpclient.InferInput(name, list(arr.shape), datatype)
    inp.set_data_from_numpy(arr, binary_data=binary)
    return inp


def _grpc_input(name: str, arr: np.ndarray, datatype: str) -> grpcclient.InferInput:
    inp = grpcclient.InferInput(name, list(arr.shape), datatype)
    inp.set_data_from_numpy(arr)
    return inp


def test_index_metadata_config_and_a_bad_config(http, grpc):
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert {k: index[k]["state"] for k in ("llm", "mlp", "types", "scale", "pipeline")} == dict.fromkeys(
        ("llm", "mlp", "types", "scale", "pipeline"), "READY"
    )
    assert index["broken"]["state"] == "UNAVAILABLE" and "bogus_field" in index["broken"]["reason"]
    assert http.is_model_ready("mlp") and grpc.is_model_ready("pipeline") and not http.is_model_ready("broken")
    assert {"statistics", "classification"} <= set(http.get_server_metadata()["extensions"])
    meta = http.get_model_metadata("mlp")
    assert meta["platform"] == "onnxruntime_onnx" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, tm.FEATURES]}]
    assert grpc.get_model_metadata("mlp", as_json=True)["outputs"] == [
        {"name": "logits", "datatype": "FP32", "shape": ["-1", str(tm.CLASSES)]}
    ]
    config = http.get_model_config("mlp")
    assert config["max_batch_size"] == 64 and config["output"][0]["label_filename"] == "labels.txt"
    assert grpc.get_model_config("pipeline").config.platform == "ensemble"


@pytest.mark.parametrize("binary", [False, True])
def test_classifier_over_http_equals_onnxruntime(http, session, binary):
    x = _x(5)
    out = httpclient.InferRequestedOutput("logits", binary_data=binary)
    result = http.infer("mlp", [_http_input("x", x, "FP32", binary)], outputs=[out], request_id="r1")
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(result.as_numpy("logits"), want, atol=1e-5)
    assert result.get_response()["id"] == "r1" and result.get_response()["model_version"] == "1"


def test_classifier_over_grpc_equals_onnxruntime(grpc, session):
    x = _x(3, seed=2)
    result = grpc.infer("mlp", [_grpc_input("x", x, "FP32")], client_timeout=T)
    np.testing.assert_allclose(result.as_numpy("logits"), session.run(None, {"x": x})[0], atol=1e-5)


def _typed(rows: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    out = {}
    for t, (_, dtype, _) in tm.TYPES.items():
        if t == "BYTES":
            out[t] = np.array([[f"é{i}-{j}".encode() for j in range(3)] for i in range(rows)], dtype=np.object_)
        elif t == "BOOL":
            out[t] = rng.integers(0, 2, (rows, 3)).astype(bool)
        else:
            out[t] = (rng.standard_normal((rows, 3)) * 50).astype(dtype)
    return out


@pytest.mark.parametrize("transport", ["json", "binary", "grpc"])
def test_every_datatype_round_trips(http, grpc, transport):
    arrays = _typed()
    if transport == "grpc":
        inputs = [_grpc_input(f"in_{t}", a, t) for t, a in arrays.items()]
        result = grpc.infer("types", inputs, client_timeout=T)
    else:
        binary = transport == "binary"
        inputs = [_http_input(f"in_{t}", a, t, binary) for t, a in arrays.items()]
        outputs = [httpclient.InferRequestedOutput(f"out_{t}", binary_data=binary) for t in arrays]
        result = http.infer("types", inputs, outputs=outputs)
    for t, a in arrays.items():
        got = result.as_numpy(f"out_{t}")
        assert got.dtype == a.dtype and got.shape == a.shape, t
        if t == "BYTES" and transport == "json":  # JSON carries BYTES as UTF-8 strings; the client keeps them str
            a = np.vectorize(bytes.decode, otypes=[object])(a)
        assert got.tolist() == a.tolist(), t


def test_classification_names_the_top_classes_with_labels(http, grpc, session):
    x = _x(2, seed=4)
    (logits,) = session.run(None, {"x": x})
    want = [[f"{row[i]:f}:{i}:{tm.LABELS[i]}".encode() for i in np.argsort(-row)[:2]] for row in logits]
    out = httpclient.InferRequestedOutput("logits", class_count=2)
    got = http.infer("mlp", [_http_input("x", x, "FP32", True)], outputs=[out]).as_numpy("logits")
    assert got.tolist() == want
    g_out = grpcclient.InferRequestedOutput("logits", class_count=2)
    g = grpc.infer("mlp", [_grpc_input("x", x, "FP32")], outputs=[g_out], client_timeout=T)
    assert g.as_numpy("logits").tolist() == want


def test_ensemble_answers_in_one_call(http, grpc, session):
    raw = _x(4, seed=5)
    (want,) = session.run(None, {"x": raw * 2})
    got = http.infer("pipeline", [_http_input("raw", raw, "FP32", True)]).as_numpy("logits")
    np.testing.assert_allclose(got, want, atol=1e-5)
    g = grpc.infer("pipeline", [_grpc_input("raw", raw, "FP32")], client_timeout=T).as_numpy("logits")
    np.testing.assert_allclose(g, want, atol=1e-5)


def _png(seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def test_the_image_ensemble_in_one_call_equals_its_three_steps(http, grpc, repo):
    """preprocess -> classifier -> postprocess as one ensemble call, and as three client calls (the
    classifier's logits also against onnxruntime in process)."""
    images = np.array([[_png(1)], [_png(2)]], dtype=np.object_)  # (batch 2, 1)
    one = http.infer("image_classifier", [_http_input("image_bytes", images, "BYTES", True)])
    pixels = http.infer("preprocess", [_http_input("image_bytes", images, "BYTES", True)]).as_numpy("image")
    logits = http.infer("classifier", [_http_input("image", pixels, "FP32", True)]).as_numpy("logits")
    labels = http.infer("postprocess", [_http_input("logits", logits, "FP32", True)]).as_numpy("labels")
    session = ort.InferenceSession(str(repo / "classifier" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(logits, session.run(None, {"image": pixels})[0], atol=1e-5)
    np.testing.assert_allclose(one.as_numpy("logits"), logits, atol=1e-5)
    assert one.as_numpy("labels").tolist() == labels.tolist()
    g = grpc.infer("image_classifier", [_grpc_input("image_bytes", images, "BYTES")], client_timeout=T)
    assert g.as_numpy("labels").tolist() == labels.tolist()


def test_the_embedder_ensemble_equals_its_encoder_run_in_process(grpc, repo):
    texts = np.array([[b"the quick brown fox"], [b"a model server batches requests"]], dtype=np.object_)
    one = grpc.infer("embedder", [_grpc_input("text", texts, "BYTES")], client_timeout=T)
    tokens = grpc.infer("tokenize", [_grpc_input("text", texts, "BYTES")], client_timeout=T)
    feeds = {k: tokens.as_numpy(k) for k in ("input_ids", "attention_mask")}
    session = ort.InferenceSession(str(repo / "encoder" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(one.as_numpy("embedding"), session.run(None, feeds)[0], atol=1e-5)


def _stats(http, model: str) -> dict:
    (entry,) = http.get_inference_statistics(model)["model_stats"]
    return entry


def test_64_concurrent_requests_are_batched_and_stats_agree(http, grpc, session, srv):
    before = _stats(http, "mlp")
    xs = [_x(1, seed=100 + i) for i in range(64)]

    # tritonclient.http's own concurrency (gevent, `concurrency=64` above): all 64 in flight at once
    pending = [http.async_infer("mlp", [_http_input("x", x, "FP32", True)]) for x in xs]
    results = [p.get_result(timeout=T).as_numpy("logits") for p in pending]
    for x, got in zip(xs, results, strict=True):
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], atol=1e-5)
    after = _stats(http, "mlp")
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 64 and executions <= 16, (inferences, executions)
    assert max(b["batch_size"] for b in after["batch_stats"]) > 1
    g = grpc.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    assert int(g["inference_count"]) == after["inference_count"]
    assert int(g["execution_count"]) == after["execution_count"]
    assert [int(b["batch_size"]) for b in g["batch_stats"]] == [b["batch_size"] for b in after["batch_stats"]]
    assert [int(b["compute_infer"]["count"]) for b in g["batch_stats"]] == [
        b["compute_infer"]["count"] for b in after["batch_stats"]
    ]
    every = {(e["name"], e["version"]) for e in http.get_inference_statistics()["model_stats"]}
    assert {("mlp", "1"), ("llm", "1"), ("pipeline", "1")} <= every
    assert srv.metric('trtserve_inference_count_total{model="mlp",version="1"}') == after["inference_count"]
    assert srv.metric('trtserve_inference_exec_count_total{model="mlp",version="1"}') == after["execution_count"]


def _gate(srv, repo: Path, model: str) -> Path:
    config = httpx.get(f"{srv.url}/v2/models/{model}/config", timeout=T).json()
    return Path(config["parameters"]["gate"]["string_value"])


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + T
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _post(srv, model: str, value: float) -> httpx.Response:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [value]}]}
    return httpx.post(f"{srv.url}/v2/models/{model}/infer", json=body, timeout=T)


def _grpc_post(srv, model: str, value: float):
    """-> the gRPC status name of one infer ("OK" when it answered)."""
    client = grpcclient.InferenceServerClient(srv.grpc)
    try:
        client.infer(model, [_grpc_input("x", np.full((1, 1), value, np.float32), "FP32")], client_timeout=T)
        return "OK"
    except InferenceServerException as err:
        return err.status()
    finally:
        client.close()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_full_queue_answers_429_at_once(srv, repo, transport):
    """One instance held busy, max_queue_size 1: of two more requests one waits and the other is
    refused while the instance is still held."""
    gate = _gate(srv, repo, "bounded")
    send = _post if transport == "http" else _grpc_post
    with ThreadPoolExecutor(3) as pool:
        running = pool.submit(_post, srv, "bounded", 1.0)
        _wait_for(gate / "started")
        more = [pool.submit(send, srv, "bounded", v) for v in (2.0, 3.0)]
        done = next(as_completed(more))
        assert not running.done()  # answered while the instance was still held: at once
        (gate / "open").touch()
        assert running.result().status_code == 200
        answers = [f.result() for f in more]
    (gate / "open").unlink()
    (gate / "started").unlink()
    refused = done.result()
    if transport == "http":
        assert refused.status_code == 429 and "queue" in refused.json()["error"].lower(), refused.text
        assert sorted(a.status_code for a in answers) == [200, 429]
    else:
        assert refused == "StatusCode.RESOURCE_EXHAUSTED"
        assert sorted(answers) == ["OK", "StatusCode.RESOURCE_EXHAUSTED"]


def test_a_request_past_its_queue_timeout_is_rejected(srv, repo):
    gate = _gate(srv, repo, "expiring")
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(_post, srv, "expiring", 1.0)
        _wait_for(gate / "started")
        late = pool.submit(_post, srv, "expiring", 2.0)
        with contextlib.suppress(TimeoutError):  # rejected when its 100 ms pass, or once the instance frees up
            late.result(timeout=5)
        (gate / "open").touch()
        assert running.result().status_code == 200
        rejected = late.result()
    assert rejected.status_code == 503 and "Request timeout expired" in rejected.json()["error"], rejected.text
    (entry,) = httpx.get(f"{srv.url}/v2/models/expiring/stats", timeout=T).json()["model_stats"]
    assert entry["inference_stats"]["fail"]["count"] == 1 and entry["inference_count"] == 1


def test_llm_routes_refuse_a_tensor_model_and_the_llm_still_generates(srv, grpc):
    r = httpx.post(f"{srv.url}/v2/models/mlp/generate", json={"text_input": "hi"}, timeout=T)
    assert r.status_code == 400 and "/v2/models/mlp/infer" in r.json()["error"]
    body = {"model": "mlp", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=T)
    assert r.status_code == 400 and "tensor model" in r.json()["error"]["message"]
    assert "mlp" in {m["id"] for m in httpx.get(f"{srv.url}/v1/models", timeout=T).json()["data"]}
    body = {"text_input": "hello", "max_tokens": 4}
    r = httpx.post(f"{srv.url}/v2/models/llm/generate", json=body, timeout=T)
    assert r.status_code == 200 and r.json()["text_output"]


def test_stream_infer_on_a_tensor_model_answers_once_per_request(srv, session):
    import queue

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    x = _x(2, seed=7)
    for i in range(2):
        client.async_stream_infer("mlp", [_grpc_input("x", x[i : i + 1], "FP32")], request_id=str(i))
    got = dict()
    for _ in range(2):
        result, error = responses.get(timeout=T)
        assert error is None
        got[result.get_response().id] = result.as_numpy("logits")
    client.stop_stream()
    client.close()
    for i in range(2):
        np.testing.assert_allclose(got[str(i)], session.run(None, {"x": x[i : i + 1]})[0], atol=1e-5)
    assert responses.empty()


def test_unload_and_load_a_tensor_model(http, session):
    x = _x(1, seed=8)
    http.unload_model("mlp")
    assert not http.is_model_ready("mlp")
    with pytest.raises(InferenceServerException) as err:
        http.infer("pipeline", [_http_input("raw", x, "FP32", True)])
    assert err.value.status() == "503"  # the ensemble's step has no ready version
    http.load_model("mlp")
    assert http.is_model_ready("mlp")
    got = http.infer("mlp", [_http_input("x", x, "FP32", True)]).as_numpy("logits")
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], atol=1e-5)
    got = http.infer("pipeline", [_http_input("raw", x, "FP32", True)]).as_numpy("logits")
    np.testing.assert_allclose(got, session.run(None, {"x": x * 2})[0], atol=1e-5)


def test_loading_a_bad_config_names_the_field(http):
    with pytest.raises(InferenceServerException, match="bogus_field") as err:
        http.load_model("broken")
    assert err.value.status() == "400"
    assert http.is_model_ready("mlp")


def test_run_serves_one_tensor_engine_dir(repo, session, tmp_path):
    """`trtserve build model.onnx -o DIR` then `trtserve run DIR`: a repository of one tensor model."""
    built = tmp_path / "built"
    cmd = [sys.executable, "-m", "trtserve.cli", "build", str(repo / "mlp" / "1" / "model.onnx"), "-o", str(built)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    s = Server(built, log=tmp_path / "built.log")
    try:
        client = httpclient.InferenceServerClient(s.url.removeprefix("http://"), network_timeout=T)
        x = _x(2, seed=9)
        got = client.infer("built", [_http_input("x", x, "FP32", True)]).as_numpy("logits")
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], atol=1e-5)
        assert client.get_model_metadata("built")["platform"] == "onnxruntime_onnx"
        client.close()
    finally:
        s.stop()
