"""The load generator: send a workload to an endpoint on a schedule and time every token.

    run = asyncio.run(run_benchmark("http://127.0.0.1:8000", "openai", "my-model", requests))
    summarize(run)  # trtserve.bench.stats

Each request streams (SSE over HTTP; Triton's ModelStreamInfer for `grpc`, see grpc_client.py);
per request it records TTFT, the gaps between token-carrying chunks (ITL), end-to-end latency,
output tokens and any error. With `stream=False` each request gets its whole answer at once (TTFT is
then the latency). Requests go out at `arrival_offsets` (Poisson/gamma, or all at once), at most
`max_concurrency` in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from trtserve.bench import endpoints
from trtserve.bench.arrivals import arrival_offsets
from trtserve.bench.server_metrics import MetricsWatcher
from trtserve.bench.workload import BenchRequest
from trtserve.engine.errors import UserError


@dataclass
class RequestResult:
    prompt_len: int  # prompt tokens: the server's usage count when it reports one, else the workload's
    output_len: int  # tokens asked for (max_tokens)
    success: bool = False
    output_tokens: int = 0  # tokens generated: usage count, else output_len on a "length" finish, else chunks
    ttft: float = 0.0  # s from sending to the first token-carrying chunk
    itl: list[float] = field(default_factory=list)  # s between successive token-carrying chunks
    latency: float = 0.0  # s from sending to the end of the stream
    start_time: float = 0.0  # s from the start of the benchmark to sending
    text: str = ""
    error: str = ""


@dataclass
class BenchRun:
    backend: str
    model: str
    base_url: str
    results: list[RequestResult]  # in workload order
    duration: float  # s from the first send to the last response
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    server_metrics: dict[str, float] | None = None  # trtserve /metrics deltas; None for other servers
    stream: bool = True


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent-event byte stream.

    Lines end only at LF or CRLF: not at U+2028, U+0085 and the other breaks `str.splitlines`
    (and so httpx's `aiter_lines`) honours, which JSON leaves unescaped inside generated text.
    """
    buf = b""
    async for chunk in chunks:
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip().decode("utf-8")
    if buf.startswith(b"data:"):
        yield buf[5:].strip().decode("utf-8")


async def _stream(client: httpx.AsyncClient, url: str, body: dict, backend: str, res: RequestResult) -> None:
    start = time.perf_counter()
    last, chunks, finish, usage = start, 0, None, None
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code != 200:
            detail = (await resp.aread()).decode(errors="replace")[:300]
            res.error = f"HTTP {resp.status_code}: {detail}"
            return
        async for payload in sse_data(resp.aiter_bytes()):
            if payload == "[DONE]":
                break
            now = time.perf_counter()
            c = endpoints.parse(backend, json.loads(payload))
            if c.error is not None:
                res.error = c.error
                return
            if c.carries_tokens:
                if chunks == 0:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last, chunks = now, chunks + 1
            res.text += c.text
            finish = c.finish_reason or finish
            if c.completion_tokens is not None:
                usage = c.completion_tokens
            if c.prompt_tokens is not None:
                res.prompt_len = c.prompt_tokens
    res.latency = time.perf_counter() - start
    if usage is not None:
        res.output_tokens = usage
    else:
        res.output_tokens = res.output_len if finish == "length" else chunks
    res.success = chunks > 0
    if not res.success:
        res.error = "the stream ended without any token"


async def _post(client: httpx.AsyncClient, url: str, body: dict, backend: str, res: RequestResult) -> None:
    """One non-streamed request: the whole answer at once."""
    start = time.perf_counter()
    resp = await client.post(url, json=body)
    res.latency = res.ttft = time.perf_counter() - start
    if resp.status_code != 200:
        res.error = f"HTTP {resp.status_code}: {resp.text[:300]}"
        return
    c = endpoints.parse_response(backend, resp.json())
    if c.error is not None:
        res.error = c.error
        return
    res.text = c.text
    if c.prompt_tokens is not None:
        res.prompt_len = c.prompt_tokens
    # KServe infer reports no count; run_benchmark requires ignore_eos there, which makes it exact.
    res.output_tokens = c.completion_tokens if c.completion_tokens is not None else res.output_len
    res.success = True


async def _one(client, target, base_url, backend, model, req: BenchRequest, prompt, opts: dict, t0) -> RequestResult:
    """opts: ignore_eos, stream."""
    res = RequestResult(prompt_len=req.prompt_len, output_len=req.output_len)
    res.start_time = time.perf_counter() - t0
    if target is not None:  # gRPC
        await target.send(model, prompt, req.output_len, opts["ignore_eos"], opts["stream"], res)
        return res
    path, body = endpoints.request(backend, model, prompt, req.output_len, opts["ignore_eos"], opts["stream"])
    try:
        await (_stream if opts["stream"] else _post)(client, base_url + path, body, backend, res)
    except (httpx.HTTPError, json.JSONDecodeError, UnicodeDecodeError) as err:
        res.success, res.error = False, f"{type(err).__name__}: {err}"
    return res


async def check_reachable(client: httpx.AsyncClient, base_url: str, backend: str) -> None:
    """Raise UserError unless something answers HTTP at base_url (any status will do)."""
    path = "/v2/health/ready" if backend == "kserve" else "/v1/models"
    try:
        await client.get(base_url + path, timeout=10.0)
    except httpx.HTTPError as err:
        raise UserError(
            f"cannot reach the server at {base_url} ({type(err).__name__}: {err or 'no answer'}); "
            "start it or fix --base-url"
        ) from None


def text_of_length(tokenizer, ids: list[int]) -> str:
    """Text that `tokenizer` encodes back to len(ids) tokens when it can (decode, re-encode, trim or pad)."""
    n, text = len(ids), tokenizer.decode(ids)
    for _ in range(8):
        enc = list(tokenizer.encode(text, add_special_tokens=False))
        if len(enc) == n:
            break
        enc = enc[:n] if len(enc) > n else enc + ids[: n - len(enc)]
        text = tokenizer.decode(enc)
    return text


async def as_text(client: httpx.AsyncClient, base_url: str, model: str, requests: list[BenchRequest], tokenizer=None):
    """Prompts as text for text-only front ends: token ids detokenized locally or by the server."""
    out = []
    for r in requests:
        if isinstance(r.prompt, str):
            out.append(r.prompt)
        elif tokenizer is not None:
            out.append(text_of_length(tokenizer, r.prompt))
        else:
            try:
                resp = await client.post(base_url + "/detokenize", json={"model": model, "tokens": r.prompt})
            except httpx.HTTPError as err:
                raise UserError(
                    f"cannot reach {base_url}/detokenize to turn token ids into text ({type(err).__name__}); "
                    "pass --tokenizer (a tokenizer or engine dir) or fix --base-url"
                ) from None
            if resp.status_code != 200 or "prompt" not in resp.json():
                raise UserError(
                    f"the server at {base_url} could not detokenize a prompt (HTTP {resp.status_code}); "
                    "pass --tokenizer so the benchmark can turn token ids into text itself"
                )
            out.append(resp.json()["prompt"])
    return out


def _progress(total: int, enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)


def _check(backend: str, max_concurrency: int | None, requests: list, stream: bool, ignore_eos: bool) -> None:
    if backend not in endpoints.BACKENDS:
        raise UserError(f"unknown backend {backend!r}; use one of {', '.join(endpoints.BACKENDS)}")
    if max_concurrency is not None and max_concurrency < 1:
        raise UserError(f"max_concurrency must be at least 1, got {max_concurrency}")
    if not requests:
        raise UserError("the workload is empty; ask for at least one request")
    if not stream and not ignore_eos and backend in endpoints.COUNTLESS:
        raise UserError(
            f"{backend} without streaming needs --ignore-eos: its answers carry no token count, so only a fixed "
            "output length can be counted"
        )


async def run_benchmark(
    base_url: str,
    backend: str,
    model: str,
    requests: list[BenchRequest],
    *,
    request_rate: float = float("inf"),
    max_concurrency: int | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    progress: bool = True,
    ignore_eos: bool = True,
    api_key: str | None = None,
    tokenizer=None,
    timeout: float = 600.0,
    stream: bool = True,
    grpc_url: str = "127.0.0.1:8001",
) -> BenchRun:
    """Send `requests` (greedy; streaming unless `stream` is false) and time them; see the module docstring.

    `tokenizer` (anything with `.decode(ids)`) turns token-id prompts into text for openai-chat,
    kserve and grpc; without it the server's /detokenize is used. `timeout` bounds each request in
    seconds. The grpc backend talks to `grpc_url` (HOST:PORT); `base_url` then serves /metrics.
    """
    _check(backend, max_concurrency, requests, stream, ignore_eos)
    base_url = base_url.rstrip("/")
    try:
        offsets = arrival_offsets(len(requests), request_rate, burstiness, seed)
    except ValueError as err:
        raise UserError(str(err)) from None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # Idle connections expire before uvicorn's 5 s keep-alive timeout: reusing one the server is closing
    # fails its request with a ReadError (seen with 64 requests in flight).
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=2.0)
    target = None
    if backend == "grpc":
        from trtserve.bench.grpc_client import GrpcTarget

        target = GrpcTarget(grpc_url, api_key, timeout)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout), limits=limits) as client:
        try:
            if target is not None:
                await target.check_reachable()
            else:
                await check_reachable(client, base_url, backend)
            prompts = [r.prompt for r in requests]
            if backend in endpoints.TEXT_ONLY:
                prompts = await as_text(client, base_url, model, requests, tokenizer)
            opts = {"ignore_eos": ignore_eos, "stream": stream}
            watcher = MetricsWatcher(client, base_url)
            await watcher.start()
            sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None

            async def send(i: int, t0: float) -> RequestResult:
                async with sem if sem is not None else contextlib.nullcontext():
                    return await _one(client, target, base_url, backend, model, requests[i], prompts[i], opts, t0)

            results, duration = await _schedule(send, offsets, progress)
            server = await watcher.stop()
        finally:
            if target is not None:
                await target.close()
    return BenchRun(
        backend, model, base_url, results, duration, request_rate, burstiness, max_concurrency, server, stream
    )


async def _schedule(send, offsets: list[float], progress: bool) -> tuple[list[RequestResult], float]:
    """Start request i at t0 + offsets[i]; -> (results in order, seconds from t0 to the last answer)."""
    with _progress(len(offsets), progress) as bar:
        task_id = bar.add_task("requests", total=len(offsets)) if bar is not None else None

        async def tracked(i: int) -> RequestResult:
            res = await send(i, t0)
            if bar is not None:
                bar.advance(task_id)
            return res

        t0 = time.perf_counter()
        tasks = []
        for i, offset in enumerate(offsets):
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(tracked(i)))
        results = await asyncio.gather(*tasks)
        return list(results), time.perf_counter() - t0
