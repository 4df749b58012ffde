"""Dynamo figures for docs/performance.md: trtserve workers behind a real Dynamo frontend on loopback.

1. Inter-token latency of running decodes while long prompts arrive: one aggregated worker (all threads)
   vs a prefill and a decode worker (the threads split between them).
2. The KV hand-off time per prompt token (the decode worker's pulls: export, stage, read).
3. The prefix hit rate on a shared-prefix workload over two aggregated workers, Dynamo's KV router
   vs round-robin.

    .venv/bin/python scripts/bench_dynamo.py [--engine engines/smollm2-135m] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from trtserve.dynamo.local import loopback_env, start_frontend, start_worker, wait_model, wait_worker
from trtserve.engine.layout import read_engine_config
from trtserve.engine.request_options import RequestOptions

NAME = "bench"


VOCAB = [40000]  # token ids drawn below this: the engine's vocabulary (set in main)


def _tok(rng: random.Random) -> int:
    return rng.randrange(3, VOCAB[0])


def _post(url: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _stream_times(url: str, body: dict, out: list[float]) -> None:
    """Stream a completion; append the arrival time of each chunk that carries text."""
    req = urllib.request.Request(
        url, json.dumps({**body, "stream": True}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                out.append(time.perf_counter())


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


class Deployment:
    """A frontend and workers in a scratch discovery directory; stop() ends each by its pid."""

    def __init__(self, engine: Path, router_mode: str = "kv"):
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-dynamo-"))
        self.engine, self.procs, self.workers = engine, [], []
        self.env = loopback_env(self.tmp / "discovery")
        self.frontend = start_frontend(self.env, self.tmp / "frontend.log", router_mode)
        self.procs.append(self.frontend)

    def add(self, role: str, threads: int, *args: str):
        env = {**self.env, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        log = self.tmp / f"{role}-{len(self.workers)}.log"
        worker = start_worker(self.engine, role, NAME, env, log, "--kv-cache-memory", "1GiB", *args)
        self.procs.append(worker)
        self.workers.append(worker)
        return worker

    def ready(self) -> None:
        for w in self.workers:
            wait_worker(w, timeout=180)
        wait_model(self.frontend, NAME, timeout=180)

    def total(self, metric: str) -> float:
        return sum(w.metric(metric) for w in self.workers)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def itl_run(engine: Path, threads: int, disaggregated: bool, args) -> dict:
    d = Deployment(engine)
    try:
        if disaggregated:
            d.add("prefill", max(threads // 2, 1))
            decode = d.add("decode", max(threads // 2, 1))
        else:
            decode = d.add("aggregated", threads)
        d.ready()
        url = d.frontend.url + "/v1/completions"
        rng = random.Random(0)
        _post(url, {"model": NAME, "prompt": [_tok(rng) for _ in range(64)], "max_tokens": 2})
        streams: list[list[float]] = [[] for _ in range(args.decodes)]
        threads_ = [
            threading.Thread(
                target=_stream_times,
                args=(url, _decode_body(rng, args.decode_tokens), streams[i]),
            )
            for i in range(args.decodes)
        ]
        for t in threads_:
            t.start()
        time.sleep(1.0)  # the decodes are running
        for _ in range(args.long_prompts):
            body = {"model": NAME, "prompt": [_tok(rng) for _ in range(args.long_len)], "max_tokens": 2}
            _post(url, body)
        for t in threads_:
            t.join(600)
        gaps = [b - a for s in streams for a, b in zip(s[1:], s[2:], strict=False)]  # first gap is the TTFT's tail
        out = {"itl_p50_ms": 1000 * statistics.median(gaps), "itl_p99_ms": 1000 * _percentile(gaps, 99)}
        out["itl_max_ms"] = 1000 * max(gaps)
        if disaggregated:
            tokens = decode.metric("trtserve_dynamo_kv_pulled_tokens_total")
            seconds = decode.metric("trtserve_dynamo_kv_pull_seconds_total")
            out |= {"pulled_tokens": tokens, "handoff_us_per_token": 1e6 * seconds / tokens if tokens else None}
        return out
    finally:
        d.stop()


def _decode_body(rng: random.Random, max_tokens: int) -> dict:
    prompt = [_tok(rng) for _ in range(32)]
    return {"model": NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}


def hit_rate_run(engine: Path, threads: int, router_mode: str, args) -> dict:
    d = Deployment(engine, router_mode)
    try:
        for _ in range(2):
            d.add("aggregated", max(threads // 2, 1))
        d.ready()
        rng = random.Random(1)
        prefixes = [[_tok(rng) for _ in range(args.prefix_len)] for _ in range(args.groups)]
        requests = [p + [_tok(rng) for _ in range(16)] for p in prefixes for _ in range(args.per_group)]
        rng.shuffle(requests)
        url = d.frontend.url + "/v1/completions"
        for prompt in requests:
            _post(url, {"model": NAME, "prompt": prompt, "max_tokens": 1})
        hits = d.total("trtserve_dynamo_prefix_hit_tokens_total")
        looked_up = d.total("trtserve_dynamo_prompt_tokens_total")
        prompts = sum(map(len, requests))
        # health probes are one-token prompts: count only the workload's tokens
        return {"hit_tokens": hits, "prompt_tokens": prompts, "hit_rate": hits / prompts, "looked_up": looked_up}
    finally:
        d.stop()


def handoff_micro(engine: Path, tokens: int, repeats: int = 3) -> dict:
    """The hand-off alone, in one process with idle engines: export (engine thread), stage, read."""
    import asyncio

    from trtserve.backends.torch_engine import TorchEngine
    from trtserve.dynamo.transport import make_transport
    from trtserve.engine.kv_transfer import KVHold
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    prefill = TorchEngine(engine)
    staging, reading = make_transport("auto", 256 << 20), make_transport("auto", 256 << 20)
    rng = random.Random(2)

    async def once() -> tuple[float, float, int]:
        req = GenerateRequest(
            [_tok(rng) for _ in range(tokens)], SamplingParams(max_tokens=1), RequestOptions(kv_transfer=KVHold())
        )
        handle = [d async for d in prefill.generate(req)][-1].kv_handle
        start = time.perf_counter()
        payload = await prefill.export_kv(handle)
        exported = time.perf_counter()
        where = staging.stage("k", payload.data)
        data = reading.fetch(where, payload.nbytes)
        done = time.perf_counter()
        staging.unstage("k")
        prefill.release_kv(handle)
        assert data == bytes(payload.data)
        return exported - start, done - exported, payload.nbytes

    try:
        runs = [asyncio.run(once()) for _ in range(repeats)]
    finally:
        prefill.shutdown()
        staging.close()
        reading.close()
    export_s = statistics.median(r[0] for r in runs)
    move_s = statistics.median(r[1] for r in runs)
    return {
        "transport": staging.name,
        "tokens": tokens,
        "bytes": runs[0][2],
        "export_us_per_token": 1e6 * export_s / tokens,
        "stage_and_read_us_per_token": 1e6 * move_s / tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", type=Path, default=Path("engines/smollm2-135m"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decodes", type=int, default=3, help="running decode streams")
    ap.add_argument("--decode-tokens", type=int, default=160)
    ap.add_argument("--long-prompts", type=int, default=3)
    ap.add_argument("--long-len", type=int, default=512)
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--per-group", type=int, default=4)
    ap.add_argument("--prefix-len", type=int, default=256)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    VOCAB[0] = min(read_engine_config(args.engine).pretrained_config.vocab_size, 40000)
    results = {
        "handoff_alone": handoff_micro(args.engine, args.long_len),
        "aggregated": itl_run(args.engine, args.threads, False, args),
        "disaggregated": itl_run(args.engine, args.threads, True, args),
        "kv_router": hit_rate_run(args.engine, args.threads, "kv", args),
        "round_robin": hit_rate_run(args.engine, args.threads, "round-robin", args),
    }
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
