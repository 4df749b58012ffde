"""Tiny ONNX models built in the tests with onnx.helper (nothing downloaded). Append new builders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what every onnxruntime >= 1.14 reads


def mlp_onnx(
    path: Path,
    sizes: tuple[int, ...] = (256, 1024, 10),
    batch_dim: bool = True,
    seed: int = 0,
    input_name: str = "x",
    output_name: str = "y",
) -> Path:
    """An MLP `x (batch, sizes[0]) -> y (batch, sizes[-1])`, ReLU between its layers, random weights
    from `seed`. batch_dim=False fixes the batch at 1 (no dynamic batch dim)."""
    rng = np.random.default_rng(seed)
    batch = "batch" if batch_dim else 1
    nodes, weights, prev = [], [], input_name
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        last = i == len(sizes) - 2
        out = output_name if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [out if last else f"g{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [batch, sizes[-1]])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


# The datatypes dtypes_onnx carries: input "in_<t>" -> output "out_<t>" (Identity), each (batch, 4).
DTYPE_TENSORS = {
    "INT64": TensorProto.INT64,
    "INT32": TensorProto.INT32,
    "INT8": TensorProto.INT8,
    "UINT8": TensorProto.UINT8,
    "BOOL": TensorProto.BOOL,
    "FP16": TensorProto.FLOAT16,
}


def dtypes_onnx(path: Path) -> Path:
    """Inputs `in_<t>` of every DTYPE_TENSORS datatype, each (batch, 4): outputs `out_<t>` = the input
    (Identity) and `total` (batch, 4) FP32 = the sum of every input cast to float (Cast graphs)."""
    nodes, outputs, casts = [], [], []
    inputs = [helper.make_tensor_value_info(f"in_{t}", p, ["batch", 4]) for t, p in DTYPE_TENSORS.items()]
    for t, p in DTYPE_TENSORS.items():
        nodes.append(helper.make_node("Identity", [f"in_{t}"], [f"out_{t}"]))
        outputs.append(helper.make_tensor_value_info(f"out_{t}", p, ["batch", 4]))
        nodes.append(helper.make_node("Cast", [f"in_{t}"], [f"f_{t}"], to=TensorProto.FLOAT))
        casts.append(f"f_{t}")
    nodes.append(helper.make_node("Sum", casts, ["total"]))
    outputs.append(helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch", 4]))
    return _save(helper.make_graph(nodes, "dtypes", inputs, outputs), path)


def double_onnx(path: Path) -> Path:
    """`y = x + x` over FP32 `x` (batch, n): a non-batch dim that varies from request to request."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])],
    )
    return _save(graph, path)


def _save(graph, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def text_onnx(path: Path) -> Path:
    """`y = x` over a string tensor `x` (batch, n): BYTES through ONNX Runtime."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "text",
        [helper.make_tensor_value_info("x", TensorProto.STRING, ["batch", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, ["batch", "n"])],
    )
    return _save(graph, path)


def example_module():
    """examples/tensor-repo/make_repo.py, the worked example's builder (make_repo, LABELS, ...)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "tensor-repo" / "make_repo.py"
    spec = importlib.util.spec_from_file_location("tensor_repo_make_repo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
