"""`trtserve bench` against a live `trtserve run` serving tensor models (an ONNX MLP with dynamic
batching, a model with a variable non-batch dim, the worked example's Python tokenizer and ensembles):
the report's counts equal the server's statistics delta, measured here with tritonclient."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from conftest import Server
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path):
    """A helper module by path: tests/api/tensor_models.py shadows tests/tensor_models.py by name here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_tensor_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


N = 12
MLP = """name: "mlp"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "x" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""
VARLEN = """name: "varlen"
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "mask" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "scale" data_type: TYPE_FP16 dims: [ 1 ] }
]
output [
  { name: "total" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "kept" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "scaled" data_type: TYPE_FP16 dims: [ 1 ] }
]
dynamic_batching { }
"""


def _varlen_onnx(path: Path) -> None:
    """ids (batch, tokens) -> total (batch, 1); mask -> kept = not mask; scale -> scaled = scale * 2."""
    axis = helper.make_tensor("axis", TensorProto.INT64, [1], [1])
    two = helper.make_tensor("two", TensorProto.FLOAT16, [], np.array([2.0], np.float16).view(np.uint16).tolist())
    nodes = [
        helper.make_node("ReduceSum", ["ids", "axis"], ["total"], keepdims=1),
        helper.make_node("Not", ["mask"], ["kept"]),
        helper.make_node("Mul", ["scale", "two"], ["scaled"]),
    ]
    graph = helper.make_graph(
        nodes,
        "varlen",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", "tokens"]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT16, ["batch", 1]),
        ],
        [
            helper.make_tensor_value_info("total", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("kept", TensorProto.BOOL, ["batch", "tokens"]),
            helper.make_tensor_value_info("scaled", TensorProto.FLOAT16, ["batch", 1]),
        ],
        initializer=[axis, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def tensor_server(tmp_path_factory):
    make_repo = _module(ROOT / "examples" / "tensor-repo" / "make_repo.py").make_repo
    repo = make_repo(tmp_path_factory.mktemp("bench") / "repo")
    _module(ROOT / "tests" / "tensor_models.py").mlp_onnx(repo / "mlp" / "1" / "model.onnx")
    (repo / "mlp" / "config.pbtxt").write_text(MLP)
    _varlen_onnx(repo / "varlen" / "1" / "model.onnx")
    (repo / "varlen" / "config.pbtxt").write_text(VARLEN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        grpc_port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("logs") / "server.log"
    server = Server(repo, "--grpc-port", str(grpc_port), log=log, env={"OMP_NUM_THREADS": "1"})
    server.grpc_url = f"127.0.0.1:{grpc_port}"
    yield server
    server.stop()


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trtserve.cli", "bench", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _counts(server, model: str) -> tuple[int, int]:
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=30)
    try:
        (entry,) = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return int(entry["inference_count"]), int(entry["execution_count"])


def _where(server, backend: str) -> list[str]:
    return ["--base-url", server.url] if backend == "kserve" else ["--grpc-url", server.grpc_url]


@pytest.mark.parametrize("backend", ["kserve", "grpc"])
def test_sweep_counts_equal_the_servers_statistics(tensor_server, tmp_path, backend):
    out = tmp_path / "bench.json"
    before = _counts(tensor_server, "mlp")
    args = ["--backend", backend, *_where(tensor_server, backend), "--model", "mlp", "-n", str(N)]
    proc = _bench(*args, "--concurrency", "1,6", "--shape", "x=2x256", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Execs" in proc.stdout and "(tensor model)" in proc.stdout
    after = _counts(tensor_server, "mlp")
    s = json.loads(out.read_text())
    assert s["backend"] == backend and s["model_id"] == "mlp" and s["inferences_per_request"] == 2
    assert s["inputs"] == {"x": {"datatype": "FP32", "shape": [2, 256]}}
    assert [lv["concurrency"] for lv in s["levels"]] == [1, 6]
    for lv in s["levels"]:
        assert lv["completed"] == N and lv["failed"] == 0
        assert lv["server_inference_count"] == 2 * N  # every row of every request, counted once by the server
        assert 1 <= lv["server_execution_count"] <= N
        assert lv["avg_batch_size"] == lv["server_inference_count"] / lv["server_execution_count"]
        assert lv["inference_throughput"] == pytest.approx(2 * lv["request_throughput"])
        assert lv["p99_latency_ms"] >= lv["p50_latency_ms"] > 0
    assert s["levels"][0]["server_execution_count"] == N  # one request in flight: nothing to batch with
    warmup = 2  # the one untimed request
    assert after[0] - before[0] == warmup + sum(lv["server_inference_count"] for lv in s["levels"])
    assert after[1] - before[1] == 1 + sum(lv["server_execution_count"] for lv in s["levels"])


def test_a_variable_dim_needs_a_shape_and_every_datatype_is_sent(tensor_server, tmp_path):
    base = ["--backend", "kserve", "--base-url", tensor_server.url, "--model", "varlen", "-n", "4"]
    proc = _bench(*base)
    assert proc.returncode == 2
    assert "input 'ids' has shape [-1, -1] with a variable dim; give it with --shape ids=1xD" in proc.stderr
    out = tmp_path / "varlen.json"
    before = _counts(tensor_server, "varlen")
    proc = _bench(*base, "--shape", "ids=1x7", "--shape", "mask=1x7", "--concurrency", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    (lv,) = json.loads(out.read_text())["levels"]
    assert lv["completed"] == 4 and lv["server_inference_count"] == 4
    assert _counts(tensor_server, "varlen")[0] - before[0] == 1 + 4


@pytest.mark.parametrize("model", ["tokenize", "embedder"])
def test_bytes_inputs_reach_python_steps_and_ensembles(tensor_server, tmp_path, model):
    out = tmp_path / "bytes.json"
    before = _counts(tensor_server, model)
    proc = _bench("--backend", "grpc", "--grpc-url", tensor_server.grpc_url, "--model", model, "-n", "6",
                  "--concurrency", "3", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    s = json.loads(out.read_text())
    assert s["inputs"] == {"text": {"datatype": "BYTES", "shape": [1, 1]}}
    (lv,) = s["levels"]
    assert lv["completed"] == 6 and lv["server_inference_count"] == 6
    assert _counts(tensor_server, model)[0] - before[0] == 1 + 6


def test_an_image_file_feeds_the_ensemble(tensor_server, tmp_path):
    from PIL import Image

    png = tmp_path / "cat.png"
    Image.fromarray(np.full((40, 50, 3), 120, np.uint8)).save(png)
    args = ["--backend", "kserve", "--base-url", tensor_server.url, "--model", "image_classifier", "-n", "3"]
    proc = _bench(*args, "--input", f"image_bytes={png}", "--json", str(tmp_path / "e.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "e.json").read_text())["levels"][0]["completed"] == 3
    proc = _bench(*args)  # random letters are no image: the warm-up's refusal is the one error line
    assert proc.returncode == 2
    assert "model 'image_classifier' refused the bench's request" in proc.stderr


def test_llm_flags_are_refused_for_a_tensor_model(tensor_server):
    before = _counts(tensor_server, "mlp")
    proc = _bench("--backend", "kserve", "--base-url", tensor_server.url, "--model", "mlp", "-n", "2",
                  "--request-rate", "5", "--input-len", "16")  # fmt: skip
    assert proc.returncode == 2
    assert "--request-rate, --input-len: LLM workload flags, and model 'mlp' is a tensor model" in proc.stderr
    assert _counts(tensor_server, "mlp") == before  # refused before any request
    proc = _bench("--backend", "openai", "--base-url", tensor_server.url, "--model", "mlp", "--concurrency", "1,2")
    assert proc.returncode == 2
    assert "--concurrency: tensor-model flags, and model 'mlp' did not answer as a tensor model" in proc.stderr
