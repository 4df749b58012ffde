"""ONNX models behind the dynamic batcher (trtserve/tensor/onnx_model.py, batched.py): outputs equal an
onnxruntime session run in process for every datatype, requests are batched under load and only with
equal shapes, bad requests and configs are refused naming the tensor. The queue's behaviour is in
test_tensor_queue.py. Models are built here with onnx.helper (tests/tensor_models.py)."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import onnxruntime as ort
import pytest
from tensor_harness import config, double_config, gated, mlp_config, rows, until
from tensor_models import DTYPE_TENSORS, dtypes_onnx, mlp_onnx, text_onnx

from trtserve.engine.errors import UserError
from trtserve.tensor.batched import BatchedModel
from trtserve.tensor.classification import classify
from trtserve.tensor.kinds import open_model
from trtserve.tensor.onnx_model import open_onnx, session_entries, thread_counts
from trtserve.tensor.types import (
    DATATYPES,
    DynamicBatching,
    InferRequest,
    InvalidInput,
)

# --- outputs against onnxruntime in process ---


def test_mlp_outputs_equal_onnxruntime_in_process(mlp_dir, reference):
    model = open_onnx(mlp_config(DynamicBatching(max_queue_delay_us=2000)), mlp_dir, None)
    rng = np.random.default_rng(1)
    xs = [rows(rng, n) for n in (1, 3, 2, 4, 1, 8, 5, 1)]

    async def go():
        return await asyncio.gather(*(model.infer(InferRequest({"x": x})) for x in xs))

    try:
        outs = asyncio.run(go())
    finally:
        model.shutdown()
    for x, out in zip(xs, outs, strict=True):
        assert list(out) == ["y"]
        np.testing.assert_allclose(out["y"], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert model.stats.inference_count == sum(len(x) for x in xs)
    assert model.stats.success.count == len(xs)


def test_every_datatype_goes_through_and_only_the_outputs_asked_for_come_back(tmp_path):
    path = dtypes_onnx(tmp_path / "1" / "model.onnx")
    cfg = config(
        "dtypes",
        [(f"in_{t}", t, (4,)) for t in DTYPE_TENSORS],
        [(f"out_{t}", t, (4,)) for t in DTYPE_TENSORS] + [("total", "FP32", (4,))],
        batching=DynamicBatching(max_queue_delay_us=2000),
    )
    model = open_onnx(cfg, path.parent, None)
    ref = ort.InferenceSession(str(path))
    rng = np.random.default_rng(2)

    def inputs(n):
        return {
            f"in_{t}": (rng.integers(0, 2, (n, 4)) if t == "BOOL" else rng.integers(-50, 100, (n, 4))).astype(
                DATATYPES[t][0]
            )
            for t in DTYPE_TENSORS
        }

    feeds = [inputs(n) for n in (1, 2, 3)]

    async def go():
        full = await asyncio.gather(*(model.infer(InferRequest(f)) for f in feeds))
        only = await model.infer(InferRequest(feeds[0], outputs=("total", "out_FP16")))
        return full, only

    try:
        full, only = asyncio.run(go())
    finally:
        model.shutdown()
    names = [o.name for o in ref.get_outputs()]
    for feed, out in zip(feeds, full, strict=True):
        want = dict(zip(names, ref.run(None, feed), strict=True))
        assert set(out) == set(want)
        for name, value in want.items():
            assert out[name].dtype == value.dtype, name
            np.testing.assert_array_equal(out[name], value)
    assert list(only) == ["total", "out_FP16"]
    np.testing.assert_array_equal(only["out_FP16"], feeds[0]["in_FP16"])


def test_bytes_cross_onnx_string_tensors_as_utf8_and_bad_text_fails_only_its_request(tmp_path):
    path = text_onnx(tmp_path / "1" / "model.onnx")
    cfg = config("text", [("x", "BYTES", (-1,))], [("y", "BYTES", (-1,))], batching=DynamicBatching())
    model, (gate,) = gated(cfg, path.parent)
    words = [np.array([["é", "b"]], dtype=np.object_), np.array([["ç", "d"], ["e", "f"]], dtype=np.object_)]
    good = [np.vectorize(str.encode, otypes=[object])(w) for w in words]
    bad = np.array([[b"\xff", b"x"]], dtype=np.object_)

    async def go():
        first = asyncio.ensure_future(model.infer(InferRequest({"x": good[0]})))
        await until(gate.started)
        rest = [asyncio.ensure_future(model.infer(InferRequest({"x": x}))) for x in (good[1], bad, good[0])]
        await asyncio.sleep(0)  # all queued: the last three form one batch
        gate.opened.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    try:
        a, b, err, c = asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    ref = ort.InferenceSession(str(path))
    for x, w, out in ((good[0], words[0], a), (good[1], words[1], b), (good[0], words[0], c)):
        assert out["y"].dtype == np.object_ and out["y"].tolist() == x.tolist()
        assert ref.run(None, {"x": w})[0].tolist() == w.tolist()  # ONNX Runtime's own str round trip
    assert isinstance(err, InvalidInput) and "input 'x' holds bytes that are not UTF-8" in str(err)
    assert [len(batch) for batch in gate.batches] == [1, 3]


# --- batching ---


def test_64_concurrent_requests_share_executions(mlp_dir, reference):
    model = open_onnx(mlp_config(DynamicBatching(max_queue_delay_us=20_000), max_batch_size=64), mlp_dir, None)
    rng = np.random.default_rng(3)
    xs = [rows(rng, 1) for _ in range(64)]

    async def go():
        return await asyncio.gather(*(model.infer(InferRequest({"x": x})) for x in xs))

    try:
        outs = asyncio.run(go())
    finally:
        model.shutdown()
    for x, out in zip(xs, outs, strict=True):
        np.testing.assert_allclose(out["y"], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    s = model.stats.to_json("mlp", "1")
    assert s["inference_count"] == 64
    assert s["execution_count"] < s["inference_count"]
    assert max(b["batch_size"] for b in s["batch_stats"]) > 1
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in s["batch_stats"]) == 64


def test_without_dynamic_batching_every_request_executes_alone(mlp_dir):
    model = open_onnx(mlp_config(None), mlp_dir, None)
    rng = np.random.default_rng(4)

    async def go():
        return await asyncio.gather(*(model.infer(InferRequest({"x": rows(rng, 2)})) for _ in range(16)))

    try:
        asyncio.run(go())
    finally:
        model.shutdown()
    assert (model.stats.execution_count, model.stats.inference_count) == (16, 32)
    assert list(model.stats.batch_stats) == [2]


def test_requests_with_other_non_batch_shapes_never_share_a_batch(double_dir):
    model, (gate,) = gated(double_config(DynamicBatching(max_queue_delay_us=20_000), max_batch_size=16), double_dir)
    rng = np.random.default_rng(5)
    # runs of four requests of one width: a run may share a batch, a change of width ends it
    xs = [rng.standard_normal((1 + i % 2, (3, 5, 3, 7)[i // 4 % 4])).astype(np.float32) for i in range(24)]

    async def go():
        first = asyncio.ensure_future(model.infer(InferRequest({"x": xs[0]})))
        await until(gate.started)  # the rest queue up behind the busy instance
        rest = [asyncio.ensure_future(model.infer(InferRequest({"x": x}))) for x in xs[1:]]
        await asyncio.sleep(0)  # all enqueued
        gate.opened.set()
        return await asyncio.gather(first, *rest)

    try:
        outs = asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    for x, out in zip(xs, outs, strict=True):
        np.testing.assert_array_equal(out["y"], x + x)
    assert any(len(b) > 1 for b in gate.batches)
    for b in gate.batches:
        assert len({r["x"].shape[1] for r in b}) == 1, [r["x"].shape for r in b]


# --- validation, loading ---


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ({"x": np.zeros((2, 256), np.int64)}, None, "inference input 'x' data-type is 'INT64', but model 'mlp' expects 'FP32'"),
        ({"x": np.zeros((2, 3), np.float32)}, None, "unexpected shape for input 'x' for model 'mlp'. Expected [-1,256], got [2,3]"),
        ({"x": np.zeros((9, 256), np.float32)}, None, "inference request batch-size must be <= 8 for 'mlp' (got 9)"),
        ({"x": np.zeros(256, np.float32)}, None, "unexpected shape for input 'x' for model 'mlp'. Expected [-1,256], got [256]"),
        ({"x": np.zeros((1, 256), np.float32), "z": np.zeros(1)}, None, "unexpected inference input 'z' for model 'mlp'; its inputs are 'x'"),
        ({}, None, "missing required input(s) 'x'"),
        ({"x": np.zeros((1, 256), np.float32)}, ("p",), "unexpected inference output 'p' for model 'mlp'; its outputs are 'y'"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_naming_the_input(mlp_dir, inputs, outputs, message):
    model = open_onnx(mlp_config(DynamicBatching()), mlp_dir, None)
    try:
        with pytest.raises(InvalidInput) as e:
            asyncio.run(model.infer(InferRequest(inputs, outputs)))
    finally:
        model.shutdown()
    assert message in str(e.value)
    assert e.value.status == 400


def test_a_model_without_a_batch_dim_takes_its_full_shape(tmp_path):
    path = mlp_onnx(tmp_path / "1" / "model.onnx", sizes=(4, 3), batch_dim=False)
    cfg = config("flat", [("x", "FP32", (1, 4))], [("y", "FP32", (1, 3))], max_batch_size=0)
    model = open_onnx(cfg, path.parent, None)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    try:
        out = asyncio.run(model.infer(InferRequest({"x": x})))
        with pytest.raises(InvalidInput, match=r"Expected \[1,4\], got \[2,4\]"):
            asyncio.run(model.infer(InferRequest({"x": np.zeros((2, 4), np.float32)})))
    finally:
        model.shutdown()
    np.testing.assert_allclose(out["y"], ort.InferenceSession(str(path)).run(None, {"x": x})[0], rtol=1e-5)


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ([("input", "FP32", (256,))], [("y", "FP32", (10,))], "config.pbtxt names input 'input' but model.onnx has inputs 'x'"),
        ([("x", "FP16", (256,))], [("y", "FP32", (10,))], "input 'x' is FP16 in config.pbtxt but FP32 in model.onnx"),
        ([("x", "FP32", (128,))], [("y", "FP32", (10,))], "input 'x' has dims [-1,128]"),
        ([("x", "FP32", (256,))], [("z", "FP32", (10,))], "config.pbtxt names output 'z'"),
    ],
)  # fmt: skip
def test_a_config_that_disagrees_with_the_graph_is_refused_naming_the_tensor(mlp_dir, inputs, outputs, message):
    with pytest.raises(UserError) as e:
        open_onnx(config("mlp", inputs, outputs), mlp_dir, None)
    assert message in str(e.value)


def test_the_kinds_table_opens_an_onnx_model_through_open_onnx(mlp_dir, reference):
    model = open_model(mlp_config(DynamicBatching()), mlp_dir, None)
    x = rows(np.random.default_rng(13), 1)
    try:
        out = asyncio.run(model.infer(InferRequest({"x": x})))
    finally:
        model.shutdown()
    assert isinstance(model, BatchedModel)
    np.testing.assert_allclose(out["y"], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_missing_or_broken_model_file_is_refused(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        open_onnx(mlp_config(), tmp_path, None)
    (tmp_path / "model.onnx").write_bytes(b"not onnx")
    with pytest.raises(UserError, match="ONNX Runtime cannot load"):
        open_onnx(mlp_config(), tmp_path, None)


def test_threads_and_session_entries_come_from_the_cpus_unless_the_parameters_say(mlp_dir):
    cpus = len(os.sched_getaffinity(0))
    assert thread_counts(mlp_config(instance_count=1)) == (cpus, 1)
    assert thread_counts(mlp_config(instance_count=2 * cpus)) == (1, 1)
    assert thread_counts(mlp_config(parameters={"intra_op_thread_count": "3", "inter_op_thread_count": "2"})) == (3, 2)
    with pytest.raises(UserError, match="intra_op_thread_count is 'many'"):
        thread_counts(mlp_config(parameters={"intra_op_thread_count": "many"}))
    model = open_onnx(mlp_config(instance_count=2), mlp_dir, None)
    model.shutdown()
    assert model.stats.execution_count == 0
    spin = mlp_config(parameters={"session.intra_op.allow_spinning": "1"})
    assert session_entries(spin)["session.intra_op.allow_spinning"] == "1"
    assert session_entries(mlp_config())["session.intra_op.allow_spinning"] == "0"
    assert "intra_op_thread_count" not in session_entries(mlp_config(parameters={"intra_op_thread_count": "1"}))


# --- classification ---


def test_classification_is_the_top_k_of_each_row_with_labels(mlp_dir, reference):
    x = rows(np.random.default_rng(11), 3)
    y = reference.run(None, {"x": x})[0]
    labels = tuple(f"class{i}" for i in range(9)) + ("",)  # the last class has an empty label line
    got = classify(y, 4, labels)
    assert got.shape == (3, 4) and got.dtype == np.object_
    for row, strings in zip(y, got, strict=True):
        order = sorted(range(len(row)), key=lambda i: -row[i])[:4]
        want = [f"{float(row[i]):f}:{i}" + (f":{labels[i]}" if labels[i] else "") for i in order]
        assert [s.decode() for s in strings] == want
    assert classify(np.array([3, 9, 1], np.int32), 5, batched=False).tolist() == [b"9:1", b"3:0", b"1:2"]
    with pytest.raises(InvalidInput, match="unsupported type 'FP16'"):
        classify(y.astype(np.float16), 1)
