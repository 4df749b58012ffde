"""Python steps (model.py files written by the tests) in process: Triton's initialize args, outputs,
finalize, model.py's errors and where they surface, sibling imports, pb_utils against tritonclient;
and ensembles over them: independent steps run concurrently, the DAG is checked at load."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from trtserve.engine.errors import UserError
from trtserve.tensor.config import parse_config, read_config
from trtserve.tensor.kinds import open_model
from trtserve.tensor.types import InferRequest, ModelExecutionError

CONFIG = """
backend: "python"
max_batch_size: 4
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }}, {{ name: "info" data_type: TYPE_STRING dims: [ 1 ] }} ]
{extra}
"""

MODEL_PY = """
import json
import os
import sys
import threading
import types

import numpy as np
import triton_python_backend_utils as pb_utils

# each load is a module of its own: the steps of one test share their barrier through sys.modules
SHARED = sys.modules.setdefault("pipelines_test_shared", types.ModuleType("pipelines_test_shared"))


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.mode = json.loads(args["model_config"])["parameters"]["mode"]["string_value"]
        if self.mode == "fail_init":
            raise RuntimeError("no weights here")
        key = os.path.dirname(args["model_repository"])
        self.barrier = SHARED.__dict__.setdefault(key, threading.Barrier(2, timeout=10))

    def execute(self, requests):
        if self.mode == "raise":
            raise ValueError("the model broke")
        if self.mode == "short":
            return []
        if self.mode == "barrier":
            self.barrier.wait()  # both parallel steps must be running at once
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()
            if self.mode == "error" and x[0, 0] < 0:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("x must be >= 0")))
                continue
            info = np.array([[json.dumps(self.args)]] * len(x), dtype=np.object_)
            tensors = [pb_utils.Tensor("y", (x * 2).astype(np.float32)), pb_utils.Tensor("info", info)]
            if self.mode == "no_y":
                tensors = tensors[1:]
            out.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return out

    def finalize(self):
        with open(self.args["model_repository"] + "/finalized", "w") as f:
            f.write(self.args["model_instance_name"])
"""


def _python_model(root: Path, name: str, mode: str, instances: int = 1) -> Path:
    d = root / name
    (d / "1").mkdir(parents=True)
    extra = f'parameters {{ key: "mode" value: {{ string_value: "{mode}" }} }}\n'
    extra += f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]"
    (d / "config.pbtxt").write_text(CONFIG.format(extra=extra))
    (d / "1" / "model.py").write_text(MODEL_PY)
    return d


def _open(d: Path, resolve=None):
    return open_model(read_config(d, d.name), d / "1", resolve or (lambda n, v: None))


def test_python_step_args_outputs_and_finalize(tmp_path):
    d = _python_model(tmp_path, "double", "ok", instances=2)
    model = _open(d)
    x = np.array([[1.0, 2.0], [3.0, -4.0]], dtype=np.float32)
    out = asyncio.run(model.infer(InferRequest({"x": x})))
    np.testing.assert_array_equal(out["y"], x * 2)
    args = json.loads(out["info"][0, 0])
    assert args["model_name"] == "double" and args["model_version"] == "1" and args["model_instance_kind"] == "CPU"
    assert args["model_repository"] == str(d) and args["model_instance_device_id"] == "0"
    assert args["model_instance_name"] in ("double_0_0", "double_0_1")
    assert json.loads(args["model_config"])["input"][0]["name"] == "x"
    model.shutdown()
    assert (d / "finalized").read_text() in ("double_0_0", "double_0_1")


@pytest.mark.parametrize(
    ("mode", "error", "match"),
    [
        ("raise", ModelExecutionError, r"model 'm': execute failed: ValueError: the model broke"),
        ("short", ModelExecutionError, r"execute returned 0 responses for 1 requests"),
        ("no_y", ModelExecutionError, r"execute's response has no output 'y'"),
        ("error", ModelExecutionError, r"model 'm': x must be >= 0"),
    ],
)
def test_model_py_errors_surface(tmp_path, mode, error, match):
    model = _open(_python_model(tmp_path, "m", mode))
    try:
        with pytest.raises(error, match=match) as err:
            asyncio.run(model.infer(InferRequest({"x": np.array([[-1.0, 0.0]], dtype=np.float32)})))
        assert err.value.status == 500
    finally:
        model.shutdown()


def test_per_response_error_fails_only_its_request(tmp_path):
    model = _open(_python_model(tmp_path, "m", "error"))

    async def both():
        good = InferRequest({"x": np.array([[1.0, 1.0]], dtype=np.float32)})
        bad = InferRequest({"x": np.array([[-1.0, 1.0]], dtype=np.float32)})
        return await asyncio.gather(model.infer(good), model.infer(bad), return_exceptions=True)

    try:
        good, bad = asyncio.run(both())
        np.testing.assert_array_equal(good["y"], [[2.0, 2.0]])
        assert isinstance(bad, ModelExecutionError) and "x must be >= 0" in str(bad)
    finally:
        model.shutdown()


def test_failing_initialize_is_a_load_error(tmp_path):
    with pytest.raises(UserError, match=r"model 'm': initialize failed: RuntimeError: no weights here"):
        _open(_python_model(tmp_path, "m", "fail_init"))
    d = _python_model(tmp_path, "nomodel", "ok")
    (d / "1" / "model.py").write_text("x = 1\n")
    with pytest.raises(UserError, match="defines no class TritonPythonModel"):
        _open(d)
    (d / "1" / "model.py").unlink()
    with pytest.raises(UserError, match="model.py there"):
        _open(d)


ENSEMBLE = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "a" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [
  { model_name: "left" model_version: -1 input_map { key: "x" value: "x" } output_map { key: "y" value: "a" } },
  { model_name: "right" model_version: -1 input_map { key: "x" value: "x" } output_map { key: "y" value: "b" } }
] }
"""


def test_independent_steps_run_concurrently(tmp_path):
    # both steps wait on one two-party barrier: run one after the other, the first would time out
    models = {n: _open(_python_model(tmp_path, n, "barrier")) for n in ("left", "right")}
    config = parse_config(ENSEMBLE, "pair", tmp_path)
    pair = open_model(config, tmp_path, lambda n, v: models[n])
    try:
        x = np.array([[1.0, 2.0]], dtype=np.float32)
        out = asyncio.run(pair.infer(InferRequest({"x": x})))
        np.testing.assert_array_equal(out["a"], x * 2)
        np.testing.assert_array_equal(out["b"], x * 2)
        assert pair.health()
    finally:
        for m in models.values():
            m.shutdown()


@pytest.mark.parametrize(
    ("steps", "match"),
    [
        (  # a cycle
            '{ model_name: "s1" model_version: -1 input_map { key: "x" value: "t2" } output_map { key: "y" value: "a" } },'
            '{ model_name: "s2" model_version: -1 input_map { key: "x" value: "a" } output_map { key: "y" value: "t2" } }',
            "cycle",
        ),
        (  # a read that nothing writes
            '{ model_name: "s1" model_version: -1 input_map { key: "x" value: "nowhere" } output_map { key: "y" value: "a" } }',
            "'nowhere'",
        ),
        (  # two writers
            '{ model_name: "s1" model_version: -1 input_map { key: "x" value: "x" } output_map { key: "y" value: "a" } },'
            '{ model_name: "s2" model_version: -1 input_map { key: "x" value: "x" } output_map { key: "y" value: "a" } }',
            "'a'",
        ),
    ],
)
def test_ensemble_dag_validation(tmp_path, steps, match):
    text = (
        ENSEMBLE.split("ensemble_scheduling")[0].replace(', { name: "b" data_type: TYPE_FP32 dims: [ 2 ] }', "")
        + f"ensemble_scheduling {{ step [ {steps} ] }}"
    )
    with pytest.raises(UserError, match=match):
        parse_config(text, "bad", tmp_path)


def test_model_py_imports_its_sibling_files(tmp_path):
    d = _python_model(tmp_path, "sib", "ok")
    (d / "1" / "sib_helpers.py").write_text("FACTOR = 2\n")
    text = (d / "1" / "model.py").read_text()
    (d / "1" / "model.py").write_text("from sib_helpers import FACTOR\n" + text.replace("(x * 2)", "(x * FACTOR)"))
    model = _open(d)
    try:
        out = asyncio.run(model.infer(InferRequest({"x": np.array([[1.5, 2.0]], dtype=np.float32)})))
        np.testing.assert_array_equal(out["y"], [[3.0, 4.0]])
    finally:
        model.shutdown()


def test_pb_utils_bytes_match_tritonclient():
    from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

    from trtserve.tensor import pb_utils

    arr = np.array([[b"a", b""], ["h\u00e9llo", b"\x00\xff"]], dtype=np.object_)
    ours = pb_utils.serialize_byte_tensor(arr)
    assert ours == serialize_byte_tensor(arr).item()  # a 0-d object array holding the bytes
    assert list(pb_utils.deserialize_bytes_tensor(ours)) == list(deserialize_bytes_tensor(ours))
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    config = {"input": [{"name": "x", "data_type": "TYPE_FP32"}], "output": [{"name": "y"}]}
    assert pb_utils.get_input_config_by_name(config, "x")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_output_config_by_name(config, "z") is None
