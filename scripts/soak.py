#!/usr/bin/env python3
"""Soak a live trtserve: N mixed requests, some abandoned mid-flight, some invalid; then check that
nothing hung, nothing answered 5xx, the engine went back to idle and the server's memory settled.

    python scripts/soak.py --url http://127.0.0.1:8000 --pid $(pgrep -f 'trtserve run') --requests 10000

The mix: OpenAI completions and chat (streaming or not, n up to 2, logprobs, stop strings, some with a
JSON-schema response_format) and KServe generate / generate_stream, with random output lengths; prompts
share long prefixes (prefix caching) and some quote themselves (n-gram speculation, when the server runs
with it); --cancel-fraction of the clients disconnect at a random moment; --invalid-fraction send a
request the server must refuse with a 4xx. Memory: the server's RssAnon + VmSwap (what a leak grows;
file-backed pages such as mapped weights come and go) sampled as requests finish, and its least-squares
slope in bytes per request after warm-up: a leak of the peers' 2026 class (1-2 KB a request with prefix
caching) shows there long before it shows in RSS.
Exit status: 0 all checks passed, 1 a check failed (the figures say which), 2 bad arguments or the
server cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "List three colours:",
    "Once upon a time",
    "Explain paged attention in one sentence.",
    "Héllo wörld, naïve café; 東京 🙂",
    "1, 2, 3, 4,",
]
# shared prefixes (a system prompt, a document) that prefix caching keeps: requests add a short question
PREFIXES = [
    "You are a careful assistant. Answer in one short sentence, plainly, without lists.",
    "Document: the paged KV cache splits each sequence's keys and values into fixed blocks.",
]
QUOTING = "Repeat exactly: alpha beta gamma delta epsilon zeta eta theta. alpha beta gamma"  # n-gram hits
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
STOPS = ["\n", ".", " the", "🙂"]
INVALID = [  # (path suffix kind, body): each must be refused with a 4xx
    ("completions", {"prompt": "x", "temperature": -1}),
    ("completions", {"prompt": "x", "max_tokens": 0}),
    ("completions", {"prompt": [], "max_tokens": 2}),
    ("chat", {"messages": []}),
    ("chat", {"messages": [{"role": "wizard", "content": "x"}]}),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "n": 99}),
    ("generate", {"text_input": "x", "max_tokens": -5}),
    ("generate", {"max_tokens": 2}),
    ("completions", b"{not json"),
]


@dataclass
class Tally:
    completed: int = 0
    cancelled: int = 0
    refused_invalid: int = 0  # invalid requests answered 4xx, as they must be
    hung: int = 0
    by_status: collections.Counter = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)  # every 5xx, stream error, accepted invalid body...

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


def status_bytes(pid: int, *keys: str) -> int | None:
    """The sum of these /proc/PID/status fields (kB there) in bytes; None where the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    found = {k: int(line.split()[1]) * 1024 for line in lines for k in keys if line.startswith(k + ":")}
    return sum(found.values()) if found else None


def rss_bytes(pid: int) -> int | None:
    return status_bytes(pid, "VmRSS")


def anon_bytes(pid: int) -> int | None:
    """Anonymous memory, resident or swapped out: what a leak grows."""
    return status_bytes(pid, "RssAnon", "VmSwap")


def slope(points: list[tuple[int, int]]) -> float | None:
    """Least-squares bytes per request of (requests done, bytes) samples; None with too few."""
    if len({n for n, _ in points}) < 2:
        return None
    mx = sum(n for n, _ in points) / len(points)
    my = sum(b for _, b in points) / len(points)
    return sum((n - mx) * (b - my) for n, b in points) / sum((n - mx) ** 2 for n, _ in points)


def pick_prompt(rng: random.Random) -> str:
    """A short prompt, a shared prefix with a question, or a prompt that quotes itself."""
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(PREFIXES) + rng.choice(PROMPTS)
    if roll < 0.5:
        return QUOTING
    return rng.choice(PROMPTS)


def make_request(rng: random.Random, model: str, max_tokens: int) -> tuple[str, str, dict, bool]:
    """(kind, path, body, streaming) for one valid request."""
    kind = rng.choice(["completions", "chat", "generate"])
    stream = rng.random() < 0.5
    tokens = rng.randint(1, max_tokens)
    prompt = pick_prompt(rng)
    if kind == "generate":
        body = {"text_input": prompt, "max_tokens": tokens, "temperature": rng.choice([0.0, 0.8])}
        if rng.random() < 0.3:
            body["stop_words"] = [rng.choice(STOPS)]
        if rng.random() < 0.2:
            body["return_log_probs"] = True
        path = f"/v2/models/{model}/generate_stream" if stream else f"/v2/models/{model}/generate"
        return kind, path, body, stream
    body = {"model": model, "max_tokens": tokens, "n": rng.choice([1, 1, 1, 2]), "stream": stream}
    body["temperature"] = rng.choice([0.0, 0.7, 1.0])
    if rng.random() < 0.3:
        body["stop"] = rng.sample(STOPS, rng.randint(1, 2))
    if kind == "completions":
        body["prompt"] = prompt
        if rng.random() < 0.3:
            body["logprobs"] = rng.randint(0, 3)
        return kind, "/v1/completions", body, stream
    body["messages"] = [{"role": "user", "content": prompt}]
    if rng.random() < 0.3:
        body |= {"logprobs": True, "top_logprobs": rng.randint(0, 3)}
    if rng.random() < 0.15:  # structured output: a grammar compiled (or reused) per request
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    return kind, "/v1/chat/completions", body, stream


def _stream_error(line: str) -> str | None:
    """The error an SSE data line carries, if any (a failure the status line could not show)."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        return f"unparseable event {data[:80]!r}"
    return str(event["error"])[:200] if isinstance(event, dict) and "error" in event else None


async def send(client: httpx.AsyncClient, path: str, body, stream: bool, tally: Tally, invalid: bool) -> None:
    """One request to its end; raises CancelledError if the caller abandons it."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    async with client.stream("POST", path, content=content, headers=headers) as resp:
        status = resp.status_code
        tally.by_status[status] += 1
        if stream and status == 200:
            async for line in resp.aiter_lines():
                err = _stream_error(line)
                if err is not None:
                    tally.problem(f"{path}: error event in a 200 stream: {err}")
        else:
            await resp.aread()
    if status >= 500:
        tally.problem(f"{path}: {status} {resp.text[:200]}")
    elif invalid:
        if 400 <= status < 500:
            tally.refused_invalid += 1
        else:
            tally.problem(f"{path}: invalid body {content[:80]!r} answered {status}")
    elif status == 200:
        tally.completed += 1
    else:
        tally.problem(f"{path}: {status} {resp.text[:200]}")


async def one(client, rng: random.Random, args, model: str, tally: Tally) -> None:
    invalid = rng.random() < args.invalid_fraction
    if invalid:
        kind, body = rng.choice(INVALID)
        path = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}.get(
            kind, f"/v2/models/{model}/generate"
        )
        stream = False
    else:
        _, path, body, stream = make_request(rng, model, args.max_tokens)
    task = asyncio.ensure_future(send(client, path, body, stream, tally, invalid))
    cancel_after = rng.uniform(0, args.cancel_window) if rng.random() < args.cancel_fraction else None
    if cancel_after is not None:
        done, _ = await asyncio.wait({task}, timeout=cancel_after)
        if not done:  # the client leaves: closing the connection is the disconnect
            task.cancel()
    (outcome,) = await asyncio.gather(task, return_exceptions=True)
    if isinstance(outcome, asyncio.CancelledError):
        tally.cancelled += 1
    elif isinstance(outcome, httpx.ReadTimeout):
        tally.hung += 1
        tally.problem(f"{path}: no byte for {args.hang_timeout} s")
    elif isinstance(outcome, BaseException):
        tally.problem(f"{path}: {type(outcome).__name__}: {outcome}")


async def sample_rss(pid: int | None, samples: list[tuple[int, int, int]], done_ref: list[int], stop: asyncio.Event):
    """(requests done, RSS, anon + swap) twice a second."""
    while pid is not None and not stop.is_set():
        rss, anon = rss_bytes(pid), anon_bytes(pid)
        if rss is not None and anon is not None:
            samples.append((done_ref[0], rss, anon))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def idle_state(client: httpx.AsyncClient, timeout: float) -> dict[str, float]:
    """Poll /metrics until no request runs or waits and no KV block is in use (or the timeout)."""
    names = ("trtserve_num_requests_running", "trtserve_num_requests_waiting", "trtserve_kv_cache_usage_ratio")
    deadline = time.monotonic() + timeout
    while True:
        text = (await client.get("/metrics")).text
        values = {}
        for line in text.splitlines():
            for name in names:
                if line.startswith(name + "{") or line.startswith(name + " "):
                    values[name] = float(line.rsplit(" ", 1)[1])
        if all(values.get(n, 1) == 0 for n in names) or time.monotonic() > deadline:
            return values
        await asyncio.sleep(0.2)


class NotReady(Exception):
    pass


async def ready(client: httpx.AsyncClient, within: float) -> None:
    """Wait for /health/ready: requests sent while the model still loads are answered 503, which is right of
    the server and no finding of the soak."""
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get("/health/ready")).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise NotReady(f"the server at {client.base_url} was not ready within {within:g} s (/health/ready)")
        await asyncio.sleep(0.5)


async def soak(args) -> dict:
    timeout = httpx.Timeout(connect=10, read=args.hang_timeout, write=30, pool=None)
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(base_url=args.url, timeout=timeout, limits=limits) as client:
        await ready(client, args.ready_timeout)
        model = args.model or (await client.get("/v1/models")).json()["data"][0]["id"]
        tally, rng = Tally(), random.Random(args.seed)
        rss: list[tuple[int, int, int]] = []
        done = [0]
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(args.pid, rss, done, stop))
        started = time.monotonic()
        todo = iter(range(args.requests))

        halt = asyncio.Event()  # SIGTERM/SIGINT: finish what is in flight, then report what ran
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, halt.set)

        async def worker(seed: int) -> None:
            wrng = random.Random(seed)
            for _ in todo:
                if halt.is_set():
                    return
                await one(client, wrng, args, model, tally)
                done[0] += 1
                if args.progress and done[0] % args.progress == 0:
                    print(f"{done[0]}/{args.requests} in {time.monotonic() - started:.0f} s", file=sys.stderr)

        await asyncio.gather(*(worker(rng.randrange(2**32)) for _ in range(args.concurrency)))
        duration = time.monotonic() - started
        end = await idle_state(client, args.idle_timeout)
        rss_end = rss_bytes(args.pid) if args.pid else None
        stop.set()
        await sampler
    return report(args, tally, rss, rss_end, end, duration, done[0])


def report(args, tally: Tally, rss, rss_end, end: dict, duration: float, sent: int) -> dict:
    warm_after = int(args.requests * args.warmup_fraction)
    warm = [r for n, r, _ in rss if n >= warm_after]
    anon_slope = slope([(n, a) for n, _, a in rss if n >= warm_after])
    mib = 1 << 20
    figures = {
        "requests": sent,
        "stopped_early": sent < args.requests,
        "completed": tally.completed,
        "cancelled": tally.cancelled,
        "invalid_refused_4xx": tally.refused_invalid,
        "hung": tally.hung,
        "status_counts": dict(sorted(tally.by_status.items())),
        "5xx": sum(v for k, v in tally.by_status.items() if k >= 500),
        "end_running": end.get("trtserve_num_requests_running"),
        "end_waiting": end.get("trtserve_num_requests_waiting"),
        "end_kv_usage": end.get("trtserve_kv_cache_usage_ratio"),
        "duration_s": round(duration, 1),
        "rss_start_mib": round(rss[0][1] / mib, 1) if rss else None,
        "rss_after_warmup_mib": round(warm[0] / mib, 1) if warm else None,
        "rss_peak_mib": round(max(r for _, r, _ in rss) / mib, 1) if rss else None,
        "rss_end_mib": round(rss_end / mib, 1) if rss_end else None,
        "anon_swap_after_warmup_mib": round(next((a for n, _, a in rss if n >= warm_after), 0) / mib, 1) or None,
        "anon_swap_end_mib": round(rss[-1][2] / mib, 1) if rss else None,
        "anon_swap_slope_bytes_per_request": round(anon_slope, 1) if anon_slope is not None else None,
        "problems": tally.problems,
    }
    failures = []
    if tally.hung:
        failures.append(f"{tally.hung} requests hung")
    if figures["5xx"]:
        failures.append(f"{figures['5xx']} answers were 5xx")
    if tally.problems:
        failures.append(f"{len(tally.problems)} problems (see problems)")
    if any(end.get(n, 1) != 0 for n in ("trtserve_num_requests_running", "trtserve_num_requests_waiting")):
        failures.append("requests still running or waiting at the end (a leak)")
    if end.get("trtserve_kv_cache_usage_ratio", 1) != 0:
        failures.append("KV blocks still in use at the end (a leak)")
    if warm and rss_end and (rss_end - warm[0]) / mib > args.rss_growth_mib:
        failures.append(f"RSS grew {(rss_end - warm[0]) / mib:.0f} MiB after warm-up (> {args.rss_growth_mib})")
    limit = args.max_slope if args.max_slope is not None else (512.0 if sent >= 2000 else None)
    if anon_slope is not None and limit is not None and anon_slope > limit:
        failures.append(f"anon + swap grew {anon_slope:.0f} bytes per request after warm-up (> {limit:g})")
    figures["failures"] = failures
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", help="model name (default: the first of /v1/models)")
    ap.add_argument("--pid", type=int, help="the server's pid, to sample its RSS from /proc")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16, help="outputs are 1..this many tokens")
    ap.add_argument("--cancel-fraction", type=float, default=0.3)
    ap.add_argument("--cancel-window", type=float, default=1.0, help="a cancelling client leaves within this many s")
    ap.add_argument("--invalid-fraction", type=float, default=0.05)
    ap.add_argument("--hang-timeout", type=float, default=60.0, help="no byte for this long is a hang")
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="how long to wait for /health/ready first")
    ap.add_argument("--idle-timeout", type=float, default=30.0, help="how long the engine has to go idle at the end")
    ap.add_argument("--warmup-fraction", type=float, default=0.1, help="RSS growth is measured from here")
    ap.add_argument("--rss-growth-mib", type=float, default=256.0, help="more RSS growth after warm-up fails")
    ap.add_argument(
        "--max-slope",
        type=float,
        help="anon + swap growth per request after warm-up that fails [512 B from 2,000 requests on; fewer "
        "requests make the slope noise, unchecked unless given]",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", type=int, default=0, help="print progress every this many requests")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1 or not 0 <= args.cancel_fraction <= 1:
        ap.error("--requests and --concurrency must be positive and --cancel-fraction in [0, 1]")
    try:
        figures = asyncio.run(soak(args))
    except httpx.ConnectError as err:
        print(f"cannot reach {args.url} ({err}); start `trtserve run ENGINE` or pass --url", file=sys.stderr)
        return 2
    except NotReady as err:
        print(err, file=sys.stderr)
        return 2
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if figures["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
