"""Tiny tensor models for tests/api/test_tensor_serving.py, built with onnx.helper (nothing
downloaded), beside the worked example's (examples/tensor-repo/make_repo.py): an MLP classifier
with labels and dynamic batching, an Identity model over every KServe datatype, a
Python scaling step, an ensemble of the two, and gated Python models whose execute waits on a file
(so a test holds the one instance busy without timing anything)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES, HIDDEN, CLASSES = 16, 32, 4
LABELS = ("cat", "dog", "bird", "fish")
# KServe datatype -> (ONNX element type, numpy dtype, config.pbtxt type)
TYPES = {
    "FP32": (TensorProto.FLOAT, np.float32, "TYPE_FP32"),
    "FP16": (TensorProto.FLOAT16, np.float16, "TYPE_FP16"),
    "INT64": (TensorProto.INT64, np.int64, "TYPE_INT64"),
    "INT32": (TensorProto.INT32, np.int32, "TYPE_INT32"),
    "INT8": (TensorProto.INT8, np.int8, "TYPE_INT8"),
    "UINT8": (TensorProto.UINT8, np.uint8, "TYPE_UINT8"),
    "BOOL": (TensorProto.BOOL, np.bool_, "TYPE_BOOL"),
    "BYTES": (TensorProto.STRING, np.object_, "TYPE_STRING"),
}


def _save(graph, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def mlp(root: Path, max_queue_delay_us: int = 50_000) -> Path:
    """`mlp`: x (N, 16) FP32 -> logits (N, 4): Relu(x W1 + b1) W2 + b2, labels beside config.pbtxt."""
    rng = np.random.default_rng(0)
    weights = {
        "W1": rng.standard_normal((FEATURES, HIDDEN)).astype(np.float32),
        "b1": rng.standard_normal(HIDDEN).astype(np.float32),
        "W2": rng.standard_normal((HIDDEN, CLASSES)).astype(np.float32),
        "b2": rng.standard_normal(CLASSES).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "W2"], ["l0"]),
        helper.make_node("Add", ["l0", "b2"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model_dir = root / "mlp"
    _save(graph, model_dir / "1" / "model.onnx")
    (model_dir / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (model_dir / "config.pbtxt").write_text(
        f"""backend: "onnxruntime"
max_batch_size: 64
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ {CLASSES} ] label_filename: "labels.txt" }} ]
dynamic_batching {{ max_queue_delay_microseconds: {max_queue_delay_us} }}
"""
    )
    return model_dir / "1" / "model.onnx"


def every_type(root: Path) -> Path:
    """One Identity per datatype: in_<T> (N, 3) -> out_<T>."""
    nodes = [helper.make_node("Identity", [f"in_{t}"], [f"out_{t}"]) for t in TYPES]
    graph = helper.make_graph(
        nodes,
        "types",
        [helper.make_tensor_value_info(f"in_{t}", onnx_t, ["N", 3]) for t, (onnx_t, _, _) in TYPES.items()],
        [helper.make_tensor_value_info(f"out_{t}", onnx_t, ["N", 3]) for t, (onnx_t, _, _) in TYPES.items()],
    )
    model_dir = root / "types"
    _save(graph, model_dir / "1" / "model.onnx")
    io = [
        (
            f'input [ {{ name: "in_{t}" data_type: {c} dims: [ 3 ] }} ]\noutput [ {{ name: "out_{t}" data_type: {c} dims: [ 3 ] }} ]'
        )
        for t, (_, _, c) in TYPES.items()
    ]
    (model_dir / "config.pbtxt").write_text('backend: "onnxruntime"\nmax_batch_size: 4\n' + "\n".join(io) + "\n")
    return model_dir / "1" / "model.onnx"


SCALE_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "raw").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("scaled", (x * 2).astype(np.float32))]))
        return out
"""

GATED_PY = """import json
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.gate = Path(params["gate"]["string_value"])

    def execute(self, requests):
        (self.gate / "started").touch()
        deadline = time.monotonic() + 60  # a test that fails does not hold the server forever
        while not (self.gate / "open").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
            for r in requests
        ]
"""


def pipeline(root: Path) -> None:
    """scale (Python: raw * 2) -> mlp, as one ensemble `pipeline`: raw -> logits."""
    scale = root / "scale"
    (scale / "1").mkdir(parents=True)
    (scale / "1" / "model.py").write_text(SCALE_PY)
    (scale / "config.pbtxt").write_text(
        f"""backend: "python"
max_batch_size: 64
input [ {{ name: "raw" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "scaled" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
dynamic_batching {{ }}
"""
    )
    ens = root / "pipeline"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text(
        f"""platform: "ensemble"
max_batch_size: 64
input [ {{ name: "raw" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "scale" model_version: -1 input_map {{ key: "raw" value: "raw" }}
      output_map {{ key: "scaled" value: "scaled" }} }},
    {{ model_name: "mlp" model_version: -1 input_map {{ key: "x" value: "scaled" }}
      output_map {{ key: "logits" value: "logits" }} }}
  ]
}}
"""
    )


def gated(root: Path, name: str, gate: Path, queue_policy: str) -> None:
    """A Python model whose execute waits for `gate`/open (and marks `gate`/started); one instance,
    no batching, the dynamic batcher's queue policy given."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(GATED_PY)
    gate.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(
        f"""backend: "python"
max_batch_size: 1
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ default_queue_policy {{ {queue_policy} }} }}
parameters {{ key: "gate" value: {{ string_value: "{gate}" }} }}
"""
    )


def broken(root: Path) -> None:
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "config.pbtxt").write_text('backend: "onnxruntime"\nmax_batch_size: 4\nbogus_field: 3\n')
