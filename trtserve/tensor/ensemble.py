"""Ensembles: `platform: "ensemble"` with ensemble_scheduling steps, a DAG over named tensors.

A step starts as soon as every tensor it reads exists; independent steps run concurrently. Each
step is a request to its own model through the repository's resolver, so composing models keep
their own batchers and instances; the ensemble has none of its own.

trtserve extension: a request may also supply tensors that steps produce (e.g. an embedder's
`input_ids` and `attention_mask` in place of its text); the steps whose outputs are all supplied
are skipped (docs/tensor-models.md, "Python steps and ensembles").
"""

from __future__ import annotations

import asyncio
import time
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import numpy as np

from trtserve.engine.errors import UserError
from trtserve.tensor.stats import ModelStatistics
from trtserve.tensor.types import (
    EnsembleStep,
    InferRequest,
    InvalidInput,
    ModelExecutionError,
    ModelNotReady,
    Resolver,
    TensorError,
    TensorModelConfig,
)
from trtserve.tensor.validate import check_inputs


def step_order(config: TensorModelConfig) -> tuple[EnsembleStep, ...]:
    """The steps in an order where each comes after the steps whose tensors it reads (config.py's
    parse_config has checked that they form a DAG: one writer per tensor, every read written)."""
    writer = {t: i for i, s in enumerate(config.ensemble) for t in s.output_map.values()}
    graph = {i: {writer[t] for t in s.input_map.values() if t in writer} for i, s in enumerate(config.ensemble)}
    try:
        return tuple(config.ensemble[i] for i in TopologicalSorter(graph).static_order())
    except CycleError:
        raise UserError(f"ensemble {config.name!r}: its steps read each other's outputs (a cycle)") from None


class EnsembleModel:
    """A TensorModel that runs its steps' models; stats are its own, request-level."""

    def __init__(self, config: TensorModelConfig, resolve: Resolver):
        self.config, self.resolve = config, resolve
        self.stats = ModelStatistics()
        self.steps = step_order(config)
        self.written = {t for s in self.steps for t in s.output_map.values()}
        self.closed = False

    async def infer(self, request: InferRequest) -> dict[str, np.ndarray]:
        start = time.perf_counter()
        elements = 1
        try:
            if self.closed:
                raise ModelNotReady(f"ensemble {self.config.name!r} is unloading")
            wanted = self._wanted(request)
            elements = self._check(request)
            tensors = await self._run(request, wanted)
        except TensorError:
            self.stats.request(False, time.perf_counter() - start, None, elements)
            raise
        self.stats.request(True, time.perf_counter() - start, None, elements)
        return {o: tensors[o] for o in wanted}

    def _wanted(self, request: InferRequest) -> tuple[str, ...]:
        names = tuple(t.name for t in self.config.outputs)
        for o in request.outputs or ():
            if o not in names:
                raise InvalidInput(f"ensemble {self.config.name!r} has no output {o!r}; its outputs are {list(names)}")
        return tuple(request.outputs) if request.outputs else names

    def _check(self, request: InferRequest) -> int:
        """The batch size (1 when the ensemble does not batch); InvalidInput naming what is wrong."""
        declared = {t.name for t in self.config.inputs}
        if set(request.inputs) <= declared:
            return check_inputs(self.config, request)
        unknown = sorted(set(request.inputs) - declared - self.written)
        if unknown:
            raise InvalidInput(
                f"ensemble {self.config.name!r} has no input or step tensor {unknown[0]!r}; "
                f"its inputs are {sorted(declared)}"
            )
        # step tensors in place of inputs: the steps that read them check their shapes
        sizes = {a.shape[0] if a.ndim else 1 for a in request.inputs.values()}
        if self.config.max_batch_size > 0 and len(sizes) > 1:
            raise InvalidInput(f"ensemble {self.config.name!r}: the inputs' batch sizes differ ({sorted(sizes)})")
        return sizes.pop() if self.config.max_batch_size > 0 else 1

    def _plan(self, wanted: tuple[str, ...], supplied: set[str]) -> list[tuple[EnsembleStep, tuple[str, ...]]]:
        """The steps to run, in order, each with the outputs asked of it (those someone reads)."""
        needed, plan = set(wanted), []
        for step in reversed(self.steps):
            outs = tuple(k for k, t in step.output_map.items() if t in needed and t not in supplied)
            if outs:
                plan.append((step, outs))
                needed |= set(step.input_map.values())
        missing = sorted(needed - supplied - self.written)
        if missing:
            raise InvalidInput(f"ensemble {self.config.name!r}: input {missing[0]!r} is missing; supply it")
        return plan[::-1]

    async def _run(self, request: InferRequest, wanted: tuple[str, ...]) -> dict[str, np.ndarray]:
        tensors = dict(request.inputs)
        pending = self._plan(wanted, set(tensors))
        running: dict[asyncio.Task, EnsembleStep] = {}
        try:
            while pending or running:
                for item in [p for p in pending if all(t in tensors for t in p[0].input_map.values())]:
                    pending.remove(item)
                    step, outs = item
                    inputs = {k: tensors[t] for k, t in step.input_map.items()}
                    running[asyncio.ensure_future(self._step(step, inputs, outs, request))] = step
                if not running:  # step_order and _plan rule this out
                    raise ModelExecutionError(f"ensemble {self.config.name!r}: no step can run")
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    result = task.result()  # a step's error ends the request; `finally` cancels the rest
                    for k, t in step.output_map.items():
                        if k in result:
                            tensors[t] = result[k]
        finally:
            for task in running:
                task.cancel()
        absent = [o for o in wanted if o not in tensors]
        if absent:
            raise ModelExecutionError(f"ensemble {self.config.name!r}: no step gave its output {absent[0]!r}")
        return tensors

    async def _step(self, step: EnsembleStep, inputs: dict, outputs: tuple[str, ...], request: InferRequest) -> dict:
        sub = InferRequest(inputs, outputs, request.priority, request.timeout_us, request.id)
        try:
            return await self.resolve(step.model_name, step.model_version).infer(sub)
        except TensorError as e:
            # keep the status (a full queue stays 429); name the step so the client knows where
            err = type(e)(f"ensemble {self.config.name!r}: step {step.model_name!r}: {e}")
            raise err from e

    def health(self) -> bool:
        """Every composing model resolves to a healthy version."""
        try:
            return all(self.resolve(s.model_name, s.model_version).health() for s in self.steps)
        except TensorError:
            return False

    def shutdown(self) -> None:
        """Refuse new requests; those in flight finish in their steps' models, which the repository owns."""
        self.closed = True


def open_ensemble(config: TensorModelConfig, version_dir: Path, resolve: Resolver) -> EnsembleModel:
    return EnsembleModel(config, resolve)
