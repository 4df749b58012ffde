"""Tensor models in the serving layer, without a server: scanning (which dirs are tensor models),
which versions load, the KV budget they do not take, the resolver, one infer through
TensorServing against onnxruntime in process, the statistics entries and the Prometheus series."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tensor_models import mlp_onnx

from trtserve.engine.errors import UserError
from trtserve.engine.run_config import RuntimeConfig
from trtserve.serve.errors import APIError
from trtserve.serve.repository.budget import KVBudget
from trtserve.serve.repository.kinds import LLM, TENSOR
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.policy import read_policy
from trtserve.serve.repository.scan import scan
from trtserve.serve.repository.tensors import ModelNotFound, is_ensemble, open_version, resolve, wanted_versions
from trtserve.serve.repository.version import State
from trtserve.serve.telemetry.metrics import Metrics
from trtserve.serve.telemetry.statistics import InferStatistics
from trtserve.serve.tensors.serving import TensorServing
from trtserve.serve.tensors.statistics import llm_entry
from trtserve.tensor.types import ModelNotReady

CONFIG = """backend: "onnxruntime"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]
dynamic_batching { }
"""


def _triton_model(root: Path, name: str = "mlp", versions=(1,), config: str = CONFIG) -> Path:
    for v in versions:
        mlp_onnx(root / name / str(v) / "model.onnx", sizes=(4, 8, 3), seed=v)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "labels.txt").write_text("a\nb\nc\n")
    return root / name


def test_scan_tells_tensor_models_from_llm_engine_dirs(tmp_path):
    _triton_model(tmp_path)
    flat = tmp_path / "built" / "1"  # `trtserve build model.onnx -o` writes config.pbtxt beside the manifest
    flat.mkdir(parents=True)
    (flat / "manifest.json").write_text("{}")
    (flat / "config.pbtxt").write_text(CONFIG)
    llm = tmp_path / "llm" / "1"
    llm.mkdir(parents=True)
    (llm / "manifest.json").write_text("{}")
    models = scan(tmp_path)
    assert models["mlp"].versions[1].config_dir == tmp_path / "mlp" and models["mlp"].versions[1].kind is TENSOR
    assert models["built"].versions[1].config_dir == flat and models["built"].versions[1].kind is TENSOR
    assert models["llm"].versions[1].config_dir is None and models["llm"].versions[1].kind is LLM
    (one,) = scan(flat, "solo").values()
    assert one.versions[1].config_dir == flat and one.versions[1].kind is TENSOR


def test_config_version_policy_picks_versions_unless_policy_yaml_names_one(tmp_path):
    model_dir = _triton_model(tmp_path, versions=(1, 2, 3), config=CONFIG + "version_policy: { all { } }\n")
    m = scan(tmp_path)["mlp"]
    assert wanted_versions(m) == [1, 2, 3]
    (model_dir / "policy.yaml").write_text("version_policy: {latest: 1}\n")
    m.policy = read_policy(model_dir)
    assert wanted_versions(m) == [3]
    (model_dir / "policy.yaml").write_text("labels: {stable: 1}\n")  # names no version_policy
    m.policy = read_policy(model_dir)
    assert wanted_versions(m) == [1, 2, 3] and not is_ensemble(m)
    m.set_policy(m.policy.change({"stable": 2}, {}))  # `trtserve repo` relabels: written back to policy.yaml
    m.policy = read_policy(model_dir)
    assert m.policy.labels == {"stable": 2} and wanted_versions(m) == [1, 2, 3]


def test_a_bad_config_is_a_user_error_naming_the_field(tmp_path):
    _triton_model(tmp_path, config=CONFIG + "bogus_field: 1\n")
    m = scan(tmp_path)["mlp"]
    with pytest.raises(UserError, match="bogus_field"):
        wanted_versions(m)
    assert not is_ensemble(m)


def test_tensor_models_take_no_kv_budget_and_no_share(tmp_path):
    _triton_model(tmp_path)
    for name in ("a", "b"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "manifest.json").write_text("{}")
    models = scan(tmp_path)
    budget = KVBudget(RuntimeConfig(kv_cache_memory=4 << 20), models, single=False)
    assert budget.reserve(models["mlp"].versions[1]) == budget.run and models["mlp"].versions[1].kv_bytes == 0
    assert budget.share(models["a"].versions[1]) == (4 << 20) // 4  # two LLMs, room for a canary each


def _opened(tmp_path: Path) -> tuple[RepoModel, ort.InferenceSession]:
    model_dir = _triton_model(tmp_path)
    m = scan(tmp_path)["mlp"]
    mv = m.versions[1]
    mv.served_model = open_version(mv, lambda name, version: resolve({"mlp": m}, name, version))
    mv.state = State.READY
    return m, ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


def test_one_infer_through_tensor_serving_equals_onnxruntime(tmp_path):
    m, session = _opened(tmp_path)
    mv = m.versions[1]
    try:
        x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        serving = TensorServing.of(mv)
        out = asyncio.run(serving.infer({"x": x}, {"priority": 0, "timeout": 1_000_000, "x-extra": 1}, None))
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(out["y"], want, atol=1e-5)
        top = asyncio.run(serving.infer({"x": x}, {}, [("y", {"classification": 2})]))["y"]
        labels = "abc"
        assert top.tolist() == [[f"{r[i]:f}:{i}:{labels[i]}".encode() for i in np.argsort(-r)[:2]] for r in want]
        assert mv.in_flight == 0 and mv.served == 2
        entry = mv.tensor.stats.to_json("mlp", "1")
        assert entry["inference_count"] == 6 and entry["execution_count"] == 2
        assert set(entry) == set(llm_entry("llm", "1", InferStatistics()))
        assert set(entry["inference_stats"]) == set(llm_entry("llm", "1", InferStatistics())["inference_stats"])
        metrics = Metrics("mlp")
        metrics.add_tensor("mlp", "1", mv.tensor.stats)
        text = metrics.render().decode()
        assert 'trtserve_inference_count_total{model="mlp",version="1"} 6.0' in text
        assert 'trtserve_inference_batch_executions_total{batch_size="3",model="mlp",version="1"} 2.0' in text
        metrics.remove_tensor("mlp", "1", mv.tensor.stats)
        assert "trtserve_inference_count_total{" not in metrics.render().decode()
    finally:
        mv.tensor.shutdown()


@pytest.mark.parametrize(
    ("parameters", "asked", "says"),
    [
        ({"priority": -1}, None, "parameter 'priority'"),
        ({"timeout": 0}, None, "parameter 'timeout'"),
        ({"sequence_id": 3}, None, "sequence batching"),
        ({}, [("z", {})], "unknown output 'z'"),
        ({}, [("y", {}), ("y", {})], "twice"),
        ({}, [("y", {"classification": "2"})], "parameter 'classification'"),
    ],
)
def test_bad_requests_are_400s_naming_what_is_wrong(tmp_path, parameters, asked, says):
    m, _ = _opened(tmp_path)
    try:
        x = np.zeros((1, 4), np.float32)
        with pytest.raises(APIError, match=says) as err:
            asyncio.run(TensorServing.of(m.versions[1]).infer({"x": x}, parameters, asked))
        assert err.value.status == 400
        with pytest.raises(APIError, match="input 'x'") as err:  # the model's own check: a wrong dim
            asyncio.run(TensorServing.of(m.versions[1]).infer({"x": np.zeros((1, 5), np.float32)}, {}, None))
        assert err.value.status == 400
    finally:
        m.versions[1].tensor.shutdown()


def test_the_resolver_names_unknown_and_unready_models(tmp_path):
    _triton_model(tmp_path)
    (tmp_path / "llm" / "1").mkdir(parents=True)
    (tmp_path / "llm" / "1" / "manifest.json").write_text("{}")
    models = scan(tmp_path)
    with pytest.raises(ModelNotFound, match="not in the repository") as err:
        resolve(models, "nope", -1)
    assert err.value.status == 404
    with pytest.raises(ModelNotFound, match="is an LLM"):
        resolve(models, "llm", -1)
    with pytest.raises(ModelNotReady, match="no ready version"):
        resolve(models, "mlp", -1)
