"""A tensor model served through Triton's dynamic batcher: one worker thread per instance (each with
its Executor: an ONNX Runtime session, a Python step), one queue (trtserve/tensor/batcher.py) they
take batches from, and futures on the server's event loop that the workers resolve.

The event loop only validates, enqueues and awaits; batch forming, execution and splitting run on
the workers, so a slow model never blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from trtserve.tensor.batcher import Batcher, Decision, Pending
from trtserve.tensor.stats import ModelStatistics
from trtserve.tensor.types import (
    InferRequest,
    ModelExecutionError,
    ModelNotReady,
    QueueTimeout,
    TensorError,
    TensorModelConfig,
)
from trtserve.tensor.validate import batch_key, check_inputs


class Executor(Protocol):
    """One instance of a model. Called on that instance's worker thread only."""

    def execute(self, batch: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray] | TensorError]:
        """One entry per request, in order: its outputs by name (each with that request's batch dim
        when the model batches), or the TensorError that request failed with. Raising fails them all."""
        ...

    def close(self) -> None: ...


@dataclass(eq=False)
class _Job:
    inputs: dict[str, np.ndarray]
    outputs: tuple[str, ...] | None
    size: int  # batch elements
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    arrival: float  # time.monotonic()
    seq: int = -1  # release order (preserve_ordering), given when its batch is formed


class BatchedModel:
    """TensorModel over `executors` (one per instance) with the config's dynamic batching.

    Statistics: compute_input is gathering the batch's requests, compute_infer the executor's
    execute (for ONNX: concatenating, running and splitting), compute_output picking each
    request's outputs; queue runs from arrival until its batch starts."""

    def __init__(self, config: TensorModelConfig, executors: list):
        if not executors:
            raise ValueError("a batched model needs at least one executor")
        self.config = config
        self.stats = ModelStatistics()
        self._executors = list(executors)
        batching = config.dynamic_batching
        self._batcher = Batcher(config.max_batch_size, batching)
        self._ordered = bool(batching and batching.preserve_ordering)
        self._cv = threading.Condition()
        self._closed = False
        self._next_seq = 0  # next sequence number a formed batch hands out
        self._next_release = 0  # preserve_ordering: the next sequence number whose result may go out
        self._held: dict[int, tuple[_Job, object, float | None]] = {}  # seq -> (job, answer, queue seconds)
        self._threads = [
            threading.Thread(target=self._worker, args=(e,), name=f"tensor-{config.name}-{i}", daemon=True)
            for i, e in enumerate(self._executors)
        ]
        for t in self._threads:
            t.start()

    # --- the event loop side ---

    async def infer(self, request: InferRequest) -> dict[str, np.ndarray]:
        if self._closed:
            raise ModelNotReady(f"model '{self.config.name}' is unloading; retry on another version or later")
        size = check_inputs(self.config, request)
        loop = asyncio.get_running_loop()
        job = _Job(request.inputs, request.outputs, size, loop, loop.create_future(), time.monotonic())
        with self._cv:
            if self._closed:
                raise ModelNotReady(f"model '{self.config.name}' is unloading; retry on another version or later")
            try:
                pending = self._batcher.enqueue(
                    job,
                    size,
                    batch_key(self.config, request),
                    job.arrival,
                    request.priority,
                    request.timeout_us,
                )
            except TensorError:
                self.stats.request(False, time.monotonic() - job.arrival, None, size)
                raise
            self._cv.notify()
        timer = None
        if pending.deadline is not None:  # reject it on time even while every instance is busy
            timer = loop.call_later(max(0.0, pending.deadline - job.arrival) + 1e-4, self._expire)
        try:
            return await job.future
        except asyncio.CancelledError:
            with self._cv:
                if self._batcher.remove(pending):  # never started: nothing will answer it
                    self.stats.request(False, time.monotonic() - job.arrival, None, size)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def health(self) -> bool:
        return not self._closed and all(t.is_alive() for t in self._threads)

    def shutdown(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            queued = self._batcher.drain()
            self._cv.notify_all()
        self._fail(queued, ModelNotReady, f"model '{self.config.name}' was unloaded while the request was queued")
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()
        for e in self._executors:
            e.close()

    def _expire(self) -> None:
        with self._cv:
            rejected = self._batcher.expire(time.monotonic())
            self._cv.notify()  # DELAY reorders the queue
        self._fail(rejected, QueueTimeout, "Request timeout expired")

    # --- the worker side ---

    def _worker(self, executor) -> None:
        while True:
            with self._cv:
                while True:
                    if self._closed:
                        return
                    d: Decision = self._batcher.next_batch(time.monotonic())
                    if d.rejected:
                        self._fail(d.rejected, QueueTimeout, "Request timeout expired")
                    if d.batch:
                        for p in d.batch:
                            p.item.seq = self._next_seq
                            self._next_seq += 1
                        if len(self._batcher):
                            self._cv.notify()  # another idle instance may take what is left
                        break
                    self._cv.wait(d.wait)
            jobs = [p.item for p in d.batch]
            try:
                self._run(executor, jobs)
            except Exception as e:  # our bug: fail the batch rather than leave its requests hanging
                why = f"model '{self.config.name}' failed: {type(e).__name__}: {e}"
                self._release([(j, ModelExecutionError(why), None) for j in jobs])

    def _run(self, executor, jobs: list[_Job]) -> None:
        start = time.monotonic()
        batch = [j.inputs for j in jobs]  # inputs go to the executor as they came: it concatenates
        t_in = time.monotonic()
        try:
            results = executor.execute(batch)
            if len(results) != len(jobs):
                raise RuntimeError(f"the executor answered {len(results)} results for {len(jobs)} requests")
        except TensorError as e:
            results = [type(e)(str(e)) for _ in jobs]
        except Exception as e:  # the model's failure fails its requests, never the worker
            results = [ModelExecutionError(f"model '{self.config.name}' failed: {e}") for _ in jobs]
        t_exec = time.monotonic()
        answers = [self._answer(j, r) for j, r in zip(jobs, results, strict=True)]
        t_out = time.monotonic()
        self.stats.execution(sum(j.size for j in jobs), t_in - start, t_exec - t_in, t_out - t_exec)
        self._release([(j, a, start - j.arrival) for j, a in zip(jobs, answers, strict=True)])

    def _answer(self, job: _Job, result) -> object:
        """The outputs the request asked for, or the error it gets."""
        if isinstance(result, TensorError):
            return result
        if not isinstance(result, dict):
            return ModelExecutionError(
                f"model '{self.config.name}' answered a {type(result).__name__}, not its outputs"
            )
        names = job.outputs if job.outputs is not None else [t.name for t in self.config.outputs]
        missing = [n for n in names if n not in result]
        if missing:
            return ModelExecutionError(f"model '{self.config.name}' did not produce output '{missing[0]}'")
        return {n: result[n] for n in names}

    def _release(self, done: list[tuple[_Job, object, float | None]]) -> None:
        """Deliver a batch's answers; with preserve_ordering, hold them until every request whose
        batch was formed earlier has been delivered."""
        if self._ordered:
            with self._cv:
                self._held.update((job.seq, (job, result, queue)) for job, result, queue in done)
                done = []
                while self._next_release in self._held:
                    done.append(self._held.pop(self._next_release))
                    self._next_release += 1
        self._deliver(done)

    def _deliver(self, done: list[tuple[_Job, object, float | None]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for job, result, queue in done:
            ok = not isinstance(result, BaseException)
            self.stats.request(ok, time.monotonic() - job.arrival, queue, job.size)
            by_loop.setdefault(job.loop, []).append((job.future, result))
        for loop, settled in by_loop.items():  # one wake-up of each event loop per batch
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for these
                loop.call_soon_threadsafe(_settle, settled)

    def _fail(self, pending: list[Pending], error: type[TensorError], message: str) -> None:
        self._deliver([(p.item, error(message), None) for p in pending])


def _settle(settled: list[tuple[asyncio.Future, object]]) -> None:
    for future, result in settled:
        if future.done():  # its client went away
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
