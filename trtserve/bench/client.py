"""The load generator: send a workload to a streaming endpoint on a schedule and time every token.

    run = asyncio.run(run_benchmark("http://127.0.0.1:8000", "openai", "my-model", requests))
    summarize(run)  # trtserve.bench.stats

Each request streams (SSE); per request it records TTFT, the gaps between token-carrying chunks
(ITL), end-to-end latency, output tokens and any error. Requests go out at `arrival_offsets`
(Poisson/gamma, or all at once), at most `max_concurrency` in flight.
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


async def _one(client, base_url, backend, model, req: BenchRequest, prompt, ignore_eos, t0) -> RequestResult:
    res = RequestResult(prompt_len=req.prompt_len, output_len=req.output_len)
    path, body = endpoints.request(backend, model, prompt, req.output_len, ignore_eos)
    res.start_time = time.perf_counter() - t0
    try:
        await _stream(client, base_url + path, body, backend, res)
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
            resp = await client.post(base_url + "/detokenize", json={"model": model, "tokens": r.prompt})
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
) -> BenchRun:
    """Send `requests` (greedy, streaming) and time them; see the module docstring.

    `tokenizer` (anything with `.decode(ids)`) turns token-id prompts into text for openai-chat and
    kserve; without it the server's /detokenize is used. `timeout` bounds each request in seconds.
    """
    if backend not in endpoints.BACKENDS:
        raise UserError(f"unknown backend {backend!r}; use one of {', '.join(endpoints.BACKENDS)}")
    if max_concurrency is not None and max_concurrency < 1:
        raise UserError(f"max_concurrency must be at least 1, got {max_concurrency}")
    if not requests:
        raise UserError("the workload is empty; ask for at least one request")
    base_url = base_url.rstrip("/")
    try:
        offsets = arrival_offsets(len(requests), request_rate, burstiness, seed)
    except ValueError as err:
        raise UserError(str(err)) from None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout), limits=limits) as client:
        await check_reachable(client, base_url, backend)
        prompts = [r.prompt for r in requests]
        if backend in endpoints.TEXT_ONLY:
            prompts = await as_text(client, base_url, model, requests, tokenizer)
        watcher = MetricsWatcher(client, base_url)
        await watcher.start()
        sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        with _progress(len(requests), progress) as bar:
            task_id = bar.add_task("requests", total=len(requests)) if bar is not None else None

            async def send(i: int) -> RequestResult:
                async with sem if sem is not None else contextlib.nullcontext():
                    res = await _one(client, base_url, backend, model, requests[i], prompts[i], ignore_eos, t0)
                if bar is not None:
                    bar.advance(task_id)
                return res

            t0 = time.perf_counter()
            tasks = []
            for i, offset in enumerate(offsets):
                delay = t0 + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(send(i)))
            results = await asyncio.gather(*tasks)
            duration = time.perf_counter() - t0
        server = await watcher.stop()
    return BenchRun(
        backend, model, base_url, list(results), duration, request_rate, burstiness, max_concurrency, server
    )
