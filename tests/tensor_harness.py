"""Shared by the tensor-model tests: TensorModelConfig builders, and a Gate executor wrapper that keeps an
instance busy so a test can fill the queue behind it."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import onnxruntime as ort

from trtserve.tensor.batched import BatchedModel
from trtserve.tensor.onnx_model import OnnxExecutor
from trtserve.tensor.types import TensorModelConfig, TensorSpec

WAIT = 30  # seconds any one step may take before the test fails instead of hanging


def config(name, inputs, outputs, max_batch_size=8, batching=None, instance_count=1, parameters=None):
    return TensorModelConfig(
        name=name,
        kind="onnx",
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        inputs=tuple(TensorSpec(n, t, d) for n, t, d in inputs),
        outputs=tuple(TensorSpec(n, t, d) for n, t, d in outputs),
        dynamic_batching=batching,
        instance_count=instance_count,
        parameters=parameters or {},
    )


def mlp_config(batching=None, **kw):
    return config("mlp", [("x", "FP32", (256,))], [("y", "FP32", (10,))], batching=batching, **kw)


def double_config(batching=None, **kw):
    return config("double", [("x", "FP32", (-1,))], [("y", "FP32", (-1,))], batching=batching, **kw)


class Gate:
    """Wraps an executor: records each batch's inputs and blocks the batches `block(batch, n)` picks
    (default: this instance's first) until `opened`, so a test can keep an instance busy."""

    def __init__(self, inner, events, block=None):
        self.inner, (self.started, self.opened) = inner, events
        self.block = block or (lambda batch, n: n == 1)
        self.batches: list[list[dict]] = []
        self.lock = threading.Lock()

    def execute(self, batch):
        with self.lock:
            self.batches.append(batch)
            n = len(self.batches)
        if self.block(batch, n):
            self.started.set()
            assert self.opened.wait(WAIT)
        return self.inner.execute(batch)

    def close(self):
        self.inner.close()


def gated(cfg, model_dir, instances=1, block=None):
    """A BatchedModel over `instances` gated ONNX Runtime executors sharing one pair of events."""
    events = (threading.Event(), threading.Event())
    gates = [
        Gate(OnnxExecutor(ort.InferenceSession(str(model_dir / "model.onnx")), cfg), events, block)
        for _ in range(instances)
    ]
    return BatchedModel(cfg, gates), gates


async def until(event: threading.Event):
    assert await asyncio.to_thread(event.wait, WAIT)


def rows(rng, n, width=256):
    return rng.standard_normal((n, width)).astype(np.float32)
