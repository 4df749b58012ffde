"""Fixtures of the tensor-model tests in this lane: small ONNX models built in the test, and
onnxruntime in process as their reference."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from tensor_models import double_onnx, mlp_onnx


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlp") / "1"
    mlp_onnx(d / "model.onnx")
    return d


@pytest.fixture(scope="module")
def double_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("double") / "1"
    double_onnx(d / "model.onnx")
    return d


@pytest.fixture(scope="module")
def reference(mlp_dir):
    return ort.InferenceSession(str(mlp_dir / "model.onnx"), providers=["CPUExecutionProvider"])
