"""The dynamic batcher's queue over real ONNX Runtime sessions (trtserve/tensor/batched.py): a full
queue refuses at once, queue timeouts reject or delay as Triton does, a client that goes away leaves
the queue, preserve_ordering holds responses, shutdown fails what is queued. A Gate executor keeps
the instance busy while a test fills the queue behind it."""

from __future__ import annotations

import asyncio

import numpy as np
import onnxruntime as ort
import pytest
from tensor_harness import WAIT, double_config, gated, mlp_config, rows, until

from trtserve.tensor.batched import BatchedModel
from trtserve.tensor.onnx_model import OnnxExecutor
from trtserve.tensor.types import (
    DynamicBatching,
    InferRequest,
    ModelExecutionError,
    ModelNotReady,
    QueueFull,
    QueuePolicy,
    QueueTimeout,
)

# --- the queue: full, timeouts, cancellation, ordering, shutdown ---


def test_a_full_queue_refuses_at_once_and_the_queued_requests_still_finish(mlp_dir, reference):
    batching = DynamicBatching(default_queue_policy=QueuePolicy(max_queue_size=2))
    model, (gate,) = gated(mlp_config(batching, max_batch_size=1), mlp_dir)
    rng = np.random.default_rng(6)
    xs = [rows(rng, 1) for _ in range(4)]

    async def go():
        running = asyncio.ensure_future(model.infer(InferRequest({"x": xs[0]})))
        await until(gate.started)
        queued = [asyncio.ensure_future(model.infer(InferRequest({"x": x}))) for x in xs[1:3]]
        await asyncio.sleep(0)  # both enqueued
        with pytest.raises(QueueFull, match="Exceeds maximum queue size"):
            await model.infer(InferRequest({"x": xs[3]}))
        assert not any(t.done() for t in queued)
        gate.opened.set()
        return await asyncio.gather(running, *queued)

    try:
        outs = asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    for x, out in zip(xs[:3], outs, strict=True):
        np.testing.assert_allclose(out["y"], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert (model.stats.success.count, model.stats.fail.count) == (3, 1)


def test_a_request_past_its_queue_timeout_is_rejected_while_the_instance_is_busy(mlp_dir):
    policy = QueuePolicy(default_timeout_us=10_000_000, allow_timeout_override=True)
    model, (gate,) = gated(mlp_config(DynamicBatching(default_queue_policy=policy)), mlp_dir)
    rng = np.random.default_rng(7)

    async def go():
        running = asyncio.ensure_future(model.infer(InferRequest({"x": rows(rng, 1)})))
        await until(gate.started)
        with pytest.raises(QueueTimeout, match="Request timeout expired"):
            await asyncio.wait_for(model.infer(InferRequest({"x": rows(rng, 1)}, timeout_us=50_000)), WAIT)
        assert not running.done()  # rejected on time, not when the instance came free
        gate.opened.set()
        await running

    try:
        asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    assert [len(b) for b in gate.batches] == [1]
    assert (model.stats.success.count, model.stats.fail.count) == (1, 1)


def test_delay_keeps_a_timed_out_request_and_runs_it_after_the_others(double_dir):
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_us=10_000_000, allow_timeout_override=True)
    model, (gate,) = gated(double_config(DynamicBatching(default_queue_policy=policy), max_batch_size=1), double_dir)

    def x(v):
        return np.full((1, 2), v, np.float32)

    async def go():
        running = asyncio.ensure_future(model.infer(InferRequest({"x": x(0)})))
        await until(gate.started)
        late = asyncio.ensure_future(model.infer(InferRequest({"x": x(1)}, timeout_us=50_000)))
        await asyncio.sleep(0.2)  # past its 50 ms: moved behind the requests that have not timed out
        fresh = asyncio.ensure_future(model.infer(InferRequest({"x": x(2)})))
        await asyncio.sleep(0)
        gate.opened.set()
        return await asyncio.gather(running, late, fresh)

    try:
        outs = asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    assert [float(o["y"][0, 0]) for o in outs] == [0.0, 2.0, 4.0]
    assert [float(b[0]["x"][0, 0]) for b in gate.batches] == [0.0, 2.0, 1.0]


def test_a_cancelled_request_leaves_the_queue_unexecuted(mlp_dir):
    model, (gate,) = gated(mlp_config(DynamicBatching()), mlp_dir)
    rng = np.random.default_rng(8)

    async def go():
        running = asyncio.ensure_future(model.infer(InferRequest({"x": rows(rng, 1)})))
        await until(gate.started)
        gone = asyncio.ensure_future(model.infer(InferRequest({"x": rows(rng, 3)})))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        gate.opened.set()
        await running

    try:
        asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    assert [sum(len(r["x"]) for r in b) for b in gate.batches] == [1]
    assert model.stats.execution_count == 1


@pytest.mark.parametrize("preserve", [True, False])
def test_preserve_ordering_holds_a_later_response_until_the_earlier_one_is_out(mlp_dir, preserve):
    batching = DynamicBatching(preserve_ordering=preserve)
    marker = 7.0  # whichever instance takes A blocks; B runs on the other at once
    model, gates = gated(
        mlp_config(batching, instance_count=2), mlp_dir, instances=2, block=lambda b, n: b[0]["x"][0, 0] == marker
    )
    rng = np.random.default_rng(9)
    done: list[str] = []

    async def go():
        a = asyncio.ensure_future(model.infer(InferRequest({"x": np.full((1, 256), marker, np.float32)})))
        a.add_done_callback(lambda _: done.append("A"))
        await until(gates[0].started)
        b = asyncio.ensure_future(model.infer(InferRequest({"x": rows(rng, 1)})))
        b.add_done_callback(lambda _: done.append("B"))
        for _ in range(WAIT * 100):  # until B has executed on the other instance
            if sum(len(g.batches) for g in gates) == 2 and model.stats.execution_count == 1:
                break
            await asyncio.sleep(0.01)
        for _ in range(WAIT * 100 if not preserve else 10):  # B's answer: out at once, or held
            if done:
                break
            await asyncio.sleep(0.01)
        held = list(done)
        gates[0].opened.set()
        await asyncio.gather(a, b)
        return held

    try:
        held = asyncio.run(go())
    finally:
        gates[0].opened.set()
        model.shutdown()
    assert model.stats.execution_count == 2
    if preserve:
        assert held == [] and done == ["A", "B"]
    else:
        assert held == ["B"] and done == ["B", "A"]


def test_shutdown_fails_queued_requests_and_refuses_new_ones(mlp_dir):
    model, (gate,) = gated(mlp_config(DynamicBatching()), mlp_dir)
    rng = np.random.default_rng(10)

    async def go():
        running = asyncio.ensure_future(model.infer(InferRequest({"x": rows(rng, 1)})))
        await until(gate.started)
        queued = asyncio.ensure_future(model.infer(InferRequest({"x": rows(rng, 1)})))
        await asyncio.sleep(0)
        stopping = asyncio.ensure_future(asyncio.to_thread(model.shutdown))
        with pytest.raises(ModelNotReady):
            await asyncio.wait_for(queued, WAIT)
        assert not model.health()
        with pytest.raises(ModelNotReady):
            await model.infer(InferRequest({"x": rows(rng, 1)}))
        gate.opened.set()  # the running batch finishes, then shutdown joins the worker
        await running
        await asyncio.wait_for(stopping, WAIT)

    try:
        asyncio.run(go())
    finally:
        gate.opened.set()
        model.shutdown()
    assert gate.inner.session is None  # closed


def test_a_failing_execution_fails_its_batch_and_the_instance_goes_on(mlp_dir, reference):
    class Failing:
        """Fails every batch holding a row of NaNs; runs the others on ONNX Runtime."""

        def __init__(self, inner):
            self.inner = inner

        def execute(self, batch):
            if any(np.isnan(r["x"]).all() for r in batch):
                raise RuntimeError("NaN input")
            return self.inner.execute(batch)

        def close(self):
            self.inner.close()

    cfg = mlp_config(None)
    model = BatchedModel(cfg, [Failing(OnnxExecutor(ort.InferenceSession(str(mlp_dir / "model.onnx")), cfg))])
    x = rows(np.random.default_rng(12), 2)
    try:
        with pytest.raises(ModelExecutionError, match="model 'mlp' failed: NaN input") as e:
            asyncio.run(model.infer(InferRequest({"x": np.full((1, 256), np.nan, np.float32)})))
        out = asyncio.run(model.infer(InferRequest({"x": x})))
        assert model.health()
    finally:
        model.shutdown()
    assert e.value.status == 500
    np.testing.assert_allclose(out["y"], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert (model.stats.success.count, model.stats.fail.count, model.stats.execution_count) == (1, 1, 2)


@pytest.mark.parametrize(
    ("answer", "message"),
    [(lambda batch: ["oops"] * len(batch), "answered a str"), (lambda batch: [], "answered 0 results for 1")],
)
def test_an_executor_that_answers_nonsense_fails_its_requests_instead_of_leaving_them(answer, message):
    class Nonsense:
        def execute(self, batch):
            return answer(batch)

        def close(self):
            pass

    model = BatchedModel(mlp_config(DynamicBatching(preserve_ordering=True)), [Nonsense()])
    x = np.zeros((1, 256), np.float32)
    try:
        for _ in range(2):  # and the instance goes on
            with pytest.raises(ModelExecutionError, match=message):
                asyncio.run(asyncio.wait_for(model.infer(InferRequest({"x": x})), WAIT))
    finally:
        model.shutdown()
