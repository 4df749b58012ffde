"""`trtserve bench` for tensor models: a closed-loop concurrency sweep over KServe v2 REST (the binary
tensor extension, tritonclient.http.aio) or Triton gRPC ModelInfer (tritonclient.grpc.aio).

    target = open_target("kserve", "127.0.0.1:8000", timeout=60)
    plans = plan_inputs(await target.metadata("mlp"), max_batch_size, shapes)
    summary = await sweep(target, "mlp", plans, max_batch_size, levels=[1, 8, 32], num_requests=200)

At each concurrency level C, C workers send requests back to back until the level's requests are
sent; every request carries one of a few seeded random input sets. Per level: client latency
percentiles, throughput, and the server's statistics-extension delta over the level (inference_count
/ execution_count = the average batch the dynamic batcher formed), when the server has the extension.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtserve.bench.tensor_inputs import InputPlan, batch_elements, input_sets
from trtserve.engine.errors import UserError

INPUT_SETS = 8  # distinct random input sets a run cycles through
PERCENTILES = (50, 99)


def _count(entry: dict, key: str) -> int:
    return int(entry.get(key, 0) or 0)  # gRPC's JSON writes uint64 as strings and leaves zeros out


def _model_counts(stats: dict, model: str) -> dict[str, int]:
    """inference_count / execution_count of `model`, summed over its versions."""
    entries = [e for e in stats.get("model_stats", []) if e.get("name") == model]
    return {k: sum(_count(e, k) for e in entries) for k in ("inference_count", "execution_count")}


class HttpTarget:
    """KServe v2 REST with the binary tensor extension (tritonclient.http.aio, one aiohttp session)."""

    protocol = "kserve"

    def __init__(self, url: str, timeout: float, api_key: str | None = None, connections: int = 100):
        try:
            import aiohttp
            import tritonclient.http.aio as client
            from tritonclient.utils import InferenceServerException
        except ImportError as err:
            raise UserError(
                f"--backend kserve needs tritonclient[http] ({err}); pip install 'tritonclient[http]'"
            ) from None
        host = url.split("://", 1)[-1].rstrip("/")  # tritonclient takes HOST:PORT without the scheme
        self.client_mod, self.url = client, host
        self.errors = (InferenceServerException, aiohttp.ClientError, asyncio.TimeoutError, OSError)
        self.client = client.InferenceServerClient(host, conn_limit=connections, conn_timeout=timeout)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else None

    async def metadata(self, model: str) -> dict:
        return await self.client.get_model_metadata(model, headers=self.headers)

    async def config(self, model: str) -> dict:
        return await self.client.get_model_config(model, headers=self.headers)

    async def counts(self, model: str) -> dict[str, int] | None:
        try:
            return _model_counts(await self.client.get_inference_statistics(model, headers=self.headers), model)
        except self.errors:
            return None

    def prepare(self, arrays: dict[str, np.ndarray], datatypes: dict[str, str]) -> list:
        out = []
        for name, arr in arrays.items():
            t = self.client_mod.InferInput(name, list(arr.shape), datatypes[name])
            t.set_data_from_numpy(arr, binary_data=True)
            out.append(t)
        return out

    async def infer(self, model: str, inputs: list) -> Any:
        return await self.client.infer(model, inputs, headers=self.headers)  # every output, binary

    async def close(self) -> None:
        await self.client.close()


class GrpcTarget:
    """Triton gRPC ModelInfer (tritonclient.grpc.aio, one channel)."""

    protocol = "grpc"

    def __init__(self, url: str, timeout: float, api_key: str | None = None):
        import tritonclient.grpc.aio as client
        from tritonclient.utils import InferenceServerException

        self.client_mod, self.timeout, self.errors = client, timeout, (InferenceServerException,)
        self.client = client.InferenceServerClient(url)
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self.url = url

    async def metadata(self, model: str) -> dict:
        return await self.client.get_model_metadata(model, headers=self.headers, as_json=True, client_timeout=10)

    async def config(self, model: str) -> dict:
        out = await self.client.get_model_config(model, headers=self.headers, as_json=True, client_timeout=10)
        return out.get("config", out)

    async def counts(self, model: str) -> dict[str, int] | None:
        try:
            stats = await self.client.get_inference_statistics(
                model, headers=self.headers, as_json=True, client_timeout=10
            )
        except self.errors:
            return None
        return _model_counts(stats, model)

    def prepare(self, arrays: dict[str, np.ndarray], datatypes: dict[str, str]) -> list:
        out = []
        for name, arr in arrays.items():
            t = self.client_mod.InferInput(name, list(arr.shape), datatypes[name])
            t.set_data_from_numpy(arr)
            out.append(t)
        return out

    async def infer(self, model: str, inputs: list) -> Any:
        return await self.client.infer(model, inputs, headers=self.headers, client_timeout=self.timeout)

    async def close(self) -> None:
        await self.client.close()


def open_target(backend: str, url: str, timeout: float, api_key: str | None = None, connections: int = 100):
    """backend "kserve": `url` is the HTTP root (scheme optional); "grpc": HOST:PORT."""
    if backend == "kserve":
        return HttpTarget(url, timeout, api_key, connections)
    if backend == "grpc":
        return GrpcTarget(url, timeout, api_key)
    raise UserError(f"--backend {backend} does not serve tensor models; use kserve or grpc")


def error_text(err: BaseException) -> str:
    message = err.message() if hasattr(err, "message") and callable(err.message) else str(err)
    status = err.status() if hasattr(err, "status") and callable(err.status) else None
    return f"{status} {message}".strip() if status else (message or type(err).__name__)


@dataclass
class LevelRun:
    """One concurrency level, timed by the client."""

    concurrency: int
    latencies: list[float]  # s from sending to the whole answer, per successful request
    errors: list[str]  # one per failed request
    duration: float  # s from the first send to the last answer


async def run_level(call: Callable[[int], Awaitable[str | None]], num_requests: int, concurrency: int) -> LevelRun:
    """`concurrency` workers send requests 0..num_requests-1 back to back; `call(i)` returns None on
    success, else the error's text."""
    latencies: list[float] = []
    errors: list[str] = []
    indices = iter(range(num_requests))  # shared: next() runs between awaits, so no index is sent twice

    async def worker() -> None:
        for i in indices:
            start = time.perf_counter()
            err = await call(i)
            if err is None:
                latencies.append(time.perf_counter() - start)
            else:
                errors.append(err)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, num_requests)))))
    return LevelRun(concurrency, latencies, errors, time.perf_counter() - start)


def describe_level(run: LevelRun, elements: int, before: dict | None, after: dict | None) -> dict:
    """A level's report: counts, throughputs, latency percentiles (ms, as trtserve.bench.stats
    defines them) and the server's statistics delta (None without the extension)."""
    from trtserve.bench.stats import describe

    ok, d = len(run.latencies), run.duration
    out: dict = {
        "concurrency": run.concurrency,
        "completed": ok,
        "failed": len(run.errors),
        "duration": d,
        "request_throughput": ok / d if d > 0 else 0.0,
        "inference_throughput": ok * elements / d if d > 0 else 0.0,
    }
    out |= describe("latency", run.latencies, PERCENTILES)
    delta = None if before is None or after is None else {k: after[k] - before[k] for k in before}
    out["server_inference_count"] = delta["inference_count"] if delta else None
    out["server_execution_count"] = delta["execution_count"] if delta else None
    execs = delta["execution_count"] if delta else 0
    out["avg_batch_size"] = delta["inference_count"] / execs if execs else None
    out["errors"] = run.errors[:5]
    return out


async def sweep(
    target,
    model: str,
    plans: list[InputPlan],
    max_batch_size: int,
    levels: list[int],
    num_requests: int,
    seed: int = 0,
    warmup: int = 1,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Run every level in order, after `warmup` untimed requests; the summary has one entry per level.
    UserError when the warm-up request fails (its error names what the server refused)."""
    datatypes = {p.name: p.datatype for p in plans}
    prepared = [target.prepare(arrays, datatypes) for arrays in input_sets(plans, INPUT_SETS, seed)]

    async def call(i: int) -> str | None:
        try:
            await target.infer(model, prepared[i % len(prepared)])
            return None
        except target.errors as err:
            return error_text(err)

    for i in range(warmup):
        if (err := await call(i)) is not None:
            raise UserError(f"model {model!r} refused the bench's request ({err}); check --shape / --input")
    elements = batch_elements(plans, max_batch_size)
    out: dict = {
        "backend": target.protocol,
        "model_id": model,
        "inputs": {p.name: {"datatype": p.datatype, "shape": list(p.shape)} for p in plans},
        "inferences_per_request": elements,
        "levels": [],
    }
    for c in levels:
        before = await target.counts(model)
        run = await run_level(call, num_requests, c)
        level = describe_level(run, elements, before, await target.counts(model))
        out["levels"].append(level)
        if progress is not None:
            progress(level)
    return out


async def _http_metadata(url: str, model: str, api_key: str | None) -> dict | None:
    import httpx

    base = url if "://" in url else "http://" + url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            resp = await client.get(f"{base.rstrip('/')}/v2/models/{model}", headers=headers)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def bench_if_tensor(
    backend: str,
    url: str,
    model: str,
    levels: list[int],
    num_requests: int,
    *,
    shapes: dict[str, tuple[int, ...]] | None = None,
    files: dict | None = None,
    seed: int = 0,
    timeout: float = 600.0,
    api_key: str | None = None,
    progress: Callable[[dict], None] | None = None,
    on_tensor: Callable[[], None] | None = None,
) -> dict | None:
    """The sweep's summary when `model` is a tensor model (tensor_inputs.is_tensor_model); None when it
    is an LLM or its metadata does not answer (the LLM bench then runs and reports that).
    `on_tensor` runs once the model is known to be a tensor model, before any request (to refuse flags)."""
    from trtserve.bench.tensor_inputs import is_tensor_model, plan_inputs

    try:
        target = open_target(backend, url, timeout, api_key, connections=max(levels))
    except UserError:  # tritonclient[http] missing: only a tensor model needs it
        metadata = await _http_metadata(url, model, api_key) if backend == "kserve" else None
        if metadata is None or not is_tensor_model(metadata):
            return None
        raise
    try:
        try:
            metadata = await asyncio.wait_for(target.metadata(model), 10)  # an unanswering host: not for --timeout
        except (*target.errors, TimeoutError):
            return None
        if not is_tensor_model(metadata):
            return None
        if on_tensor is not None:
            on_tensor()
        try:
            max_batch_size = int((await target.config(model)).get("max_batch_size", 0) or 0)
        except target.errors:  # no model_configuration extension: only --shape gives a -1 dim
            max_batch_size = 0
        plans = plan_inputs(metadata, max_batch_size, shapes, files)
        return await sweep(target, model, plans, max_batch_size, levels, num_requests, seed, progress=progress)
    finally:
        await target.close()
