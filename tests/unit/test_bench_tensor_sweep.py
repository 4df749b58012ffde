"""`trtserve bench` for tensor models, without a server: input plans from metadata, random data per
datatype, and the sweep's accounting against a target that counts like the statistics extension."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from tritonclient.utils import triton_to_np_dtype

from trtserve.bench.tensor import describe_level, run_level, sweep
from trtserve.bench.tensor_inputs import (
    batch_elements,
    input_sets,
    is_tensor_model,
    parse_input_files,
    parse_shapes,
    plan_inputs,
    random_tensor,
)
from trtserve.engine.errors import UserError

MLP = {
    "name": "mlp",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 256]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 10]}],
}
SEQ = {
    "name": "enc",
    "inputs": [
        {"name": "ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "mask", "datatype": "BOOL", "shape": [-1, -1]},
    ],
    "outputs": [{"name": "emb", "datatype": "FP32", "shape": [-1, 8]}],
}


def test_llm_metadata_is_not_a_tensor_model():
    from trtserve.serve.kserve.serving import KServeServing

    llm = KServeServing.__new__(KServeServing)
    text_only = SimpleNamespace(info=SimpleNamespace(vision=None))  # a vision model adds its image inputs
    llm.svc = SimpleNamespace(model_name="m", version="1", engine=text_only)
    llm.platform = "trtserve"
    assert not is_tensor_model(llm.model_metadata())  # what trtserve's LLM answers on GET /v2/models/m
    assert is_tensor_model(MLP) and is_tensor_model(SEQ)
    embedder = {"inputs": [{"name": "text_input"}], "outputs": [{"name": "embedding"}]}
    assert is_tensor_model(embedder)  # a text input alone does not make an LLM


def test_batch_dim_becomes_one_and_shapes_are_checked():
    (x,) = plan_inputs(MLP, max_batch_size=8)
    assert (x.name, x.datatype, x.shape) == ("x", "FP32", (1, 256))
    assert plan_inputs(MLP, 8, {"x": (4, 256)})[0].shape == (4, 256)
    assert batch_elements(plan_inputs(MLP, 8, {"x": (4, 256)}), 8) == 4
    with pytest.raises(UserError, match=r"--shape ids=1xD"):
        plan_inputs(SEQ, max_batch_size=8)
    plans = plan_inputs(SEQ, 8, parse_shapes(["ids=2x7", "mask=2x7"]))
    assert [p.shape for p in plans] == [(2, 7), (2, 7)]
    with pytest.raises(UserError, match="does not fit input 'x'"):
        plan_inputs(MLP, 8, {"x": (1, 255)})  # a fixed dim changed
    with pytest.raises(UserError, match="does not fit input 'x'"):
        plan_inputs(MLP, 8, {"x": (256,)})  # the batch dim left out
    with pytest.raises(UserError, match="has no input 'z'; its inputs are x"):
        plan_inputs(MLP, 8, {"z": (1,)})
    with pytest.raises(UserError, match=r"--shape x=Dx256"):
        plan_inputs(MLP, max_batch_size=0)  # not batching: a leading -1 is an ordinary variable dim


@pytest.mark.parametrize("bad", ["x", "x=", "=1x2", "x=1xa", "x=-1x3"])
def test_bad_shape_flags_say_how_to_write_them(bad):
    with pytest.raises(UserError, match="NAME=D1xD2"):
        parse_shapes([bad])


@pytest.mark.parametrize(
    "datatype", ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
    + ["FP16", "FP32", "FP64", "BYTES"]
)  # fmt: skip
def test_random_data_for_every_datatype(datatype):
    a = random_tensor(datatype, (3, 5), np.random.default_rng(1))
    assert a.shape == (3, 5) and a.dtype == np.dtype(triton_to_np_dtype(datatype))
    b = random_tensor(datatype, (3, 5), np.random.default_rng(1))
    assert np.array_equal(a, b)  # seeded
    if datatype == "BYTES":
        assert all(isinstance(v, bytes) and len(v) == 16 and v.isalpha() for v in a.reshape(-1))
    elif a.dtype.kind in "iu":
        assert a.min() >= 0 and a.max() < 8


def test_input_files_replace_random_data(tmp_path):
    png = tmp_path / "cat.png"
    png.write_bytes(b"\x89PNG not really")
    meta = {"name": "e", "inputs": [{"name": "image", "datatype": "BYTES", "shape": [-1, 1]}]}
    (plan,) = plan_inputs(meta, 4, files=parse_input_files([f"image={png}"]))
    assert plan.shape == (1, 1) and plan.data[0, 0] == png.read_bytes()
    sets = input_sets([plan], 3, seed=0)
    assert all(s["image"] is plan.data for s in sets)
    np.save(tmp_path / "x.npy", np.ones((2, 256), np.float64))
    with pytest.raises(UserError, match="holds float64; input 'x' is FP32"):
        plan_inputs(MLP, 8, files={"x": tmp_path / "x.npy"})
    np.save(tmp_path / "x.npy", np.ones((2, 256), np.float32))
    assert plan_inputs(MLP, 8, files={"x": tmp_path / "x.npy"})[0].shape == (2, 256)
    with pytest.raises(UserError, match="NAME=FILE"):
        parse_input_files([f"x={tmp_path / 'missing.npy'}"])


class CountingTarget:
    """Answers like a server with the statistics extension that batches `batch` requests per execution."""

    protocol, errors = "fake", (RuntimeError,)

    def __init__(self, batch: int, fail_every: int = 0):
        self.batch, self.fail_every, self.seen = batch, fail_every, []
        self.inferences = self.executions = 0

    def prepare(self, arrays, datatypes):
        return arrays

    async def infer(self, model, inputs):
        await asyncio.sleep(0)
        self.seen.append(inputs)
        if self.fail_every and len(self.seen) % self.fail_every == 0:
            raise RuntimeError("refused")
        self.inferences += inputs["x"].shape[0]
        if self.inferences % self.batch == 0 or self.executions == 0:
            self.executions += 1

    async def counts(self, model):
        return {"inference_count": self.inferences, "execution_count": self.executions}


def test_sweep_reports_the_servers_delta_per_level():
    target = CountingTarget(batch=4, fail_every=5)
    plans = plan_inputs(MLP, 8)
    s = asyncio.run(sweep(target, "mlp", plans, 8, levels=[1, 3], num_requests=20, seed=3, warmup=1))
    assert len(target.seen) == 1 + 2 * 20  # the warm-up, then every level's requests, each sent once
    assert [lv["concurrency"] for lv in s["levels"]] == [1, 3]
    total = 1
    for lv in s["levels"]:
        assert lv["completed"] + lv["failed"] == 20
        assert lv["failed"] == len([i for i in range(total + 1, total + 21) if i % 5 == 0])
        assert lv["server_inference_count"] == lv["completed"]  # one element per request
        assert lv["avg_batch_size"] == lv["server_inference_count"] / lv["server_execution_count"]
        assert lv["inference_throughput"] == pytest.approx(lv["completed"] / lv["duration"])
        assert lv["errors"] and lv["errors"][0] == "refused"
        total += 20
    distinct = {id(inputs) for inputs in target.seen}
    assert len(distinct) == 8  # requests cycle over the seeded input sets


def test_a_refused_warmup_is_one_clear_error():
    target = CountingTarget(batch=1, fail_every=1)
    with pytest.raises(UserError, match=r"model 'mlp' refused the bench's request \(refused\)"):
        asyncio.run(sweep(target, "mlp", plan_inputs(MLP, 8), 8, levels=[1], num_requests=2))


def test_levels_without_statistics_report_no_batch():
    run = asyncio.run(run_level(lambda i: asyncio.sleep(0), num_requests=5, concurrency=2))
    lv = describe_level(run, elements=1, before=None, after=None)
    assert lv["completed"] == 5 and lv["avg_batch_size"] is None and lv["server_inference_count"] is None
    assert lv["p50_latency_ms"] == lv["median_latency_ms"] and lv["p99_latency_ms"] >= lv["p50_latency_ms"]


def test_without_the_http_client_only_a_tensor_model_needs_it(monkeypatch):
    from trtserve.bench import tensor

    def no_http_client(*args, **kwargs):
        raise UserError("--backend kserve needs tritonclient[http]")

    monkeypatch.setattr(tensor, "open_target", no_http_client)
    answers = {"llm": {"inputs": [{"name": "text_input"}], "outputs": [{"name": "text_output"}]}, "mlp": MLP}

    async def metadata(url, model, api_key):
        return answers.get(model)

    monkeypatch.setattr(tensor, "_http_metadata", metadata)
    for model in ("llm", "unknown"):  # the LLM bench runs (and reports an unknown model itself)
        assert asyncio.run(tensor.bench_if_tensor("kserve", "http://h:1", model, [1], 1)) is None
    with pytest.raises(UserError, match=r"tritonclient\[http\]"):
        asyncio.run(tensor.bench_if_tensor("kserve", "http://h:1", "mlp", [1], 1))
