"""HTTP layer overhead: the same workload through `trtserve run` vs the in-process engine.

    .venv/bin/python scripts/bench_http.py ENGINE_DIR [--requests 64] [--threads 2]

Both run the same requests (greedy, fixed output lengths via ignore_eos) with the same engine
settings in one run; prints output tokens/s for each and the ratio. The in-process run goes first;
then the HTTP client (this process) lowers its own priority (`--client-nice`, default 19) once the
server is up, so that the load generator, which a real deployment runs elsewhere, takes the 2 cores
from the server's OpenMP threads as little as possible (measured on SmolLM2: 88% of in-process
throughput with the client at equal priority, 94% niced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import httpx


def workload(n: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    words = [
        "the",
        "model",
        "server",
        "batches",
        "requests",
        "over",
        "a",
        "paged",
        "cache",
        "of",
        "blocks",
        "and",
        "streams",
        "tokens",
    ]
    return [(" ".join(rng.choice(words) for _ in range(rng.randint(16, 200))), rng.randint(16, 128)) for _ in range(n)]


def in_process(engine: str, work, kv: str) -> dict:
    from trtserve import LLM, SamplingParams
    from trtserve.build.inspect import parse_memory

    llm = LLM(engine, kv_cache_memory=parse_memory(kv))
    llm.generate("warm up", SamplingParams(max_tokens=2))
    t0 = time.perf_counter()
    outs = llm.generate(
        [p for p, _ in work], [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for _, m in work]
    )
    dt = time.perf_counter() - t0
    n = sum(len(o.token_ids) for o in outs)
    return {"seconds": round(dt, 2), "output_tokens": n, "tok_per_s": round(n / dt, 1)}


def over_http(engine: str, work, kv: str, client_nice: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trtserve.cli",
            "run",
            engine,
            "--port",
            str(port),
            "--kv-cache-memory",
            kv,
            "--max-queued-requests",
            "100000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        os.nice(client_nice)  # the server started at normal priority and keeps it
        model = os.path.basename(os.path.normpath(engine))

        async def main():
            async with httpx.AsyncClient(
                base_url=url, timeout=3600, limits=httpx.Limits(max_connections=len(work))
            ) as c:
                t0 = time.perf_counter()
                rs = await asyncio.gather(
                    *(
                        c.post(
                            "/v1/completions",
                            json={"model": model, "prompt": p, "max_tokens": m, "temperature": 0, "ignore_eos": True},
                        )
                        for p, m in work
                    )
                )
                return time.perf_counter() - t0, rs

        dt, rs = asyncio.run(main())
        n = sum(r.json()["usage"]["completion_tokens"] for r in rs)
        return {"seconds": round(dt, 2), "output_tokens": n, "tok_per_s": round(n / dt, 1)}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-cache-memory", default="2GiB")
    ap.add_argument("--client-nice", type=int, default=19, help="niceness the HTTP client adds to itself [19]")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    work = workload(args.requests)
    local = in_process(args.engine, work, args.kv_cache_memory)
    http = over_http(args.engine, work, args.kv_cache_memory, args.client_nice)
    print(
        json.dumps(
            {
                "threads": args.threads,
                "requests": len(work),
                "client_nice": args.client_nice,
                "in_process": local,
                "http": http,
                "http_over_in_process": round(http["tok_per_s"] / local["tok_per_s"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
