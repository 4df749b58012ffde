"""The resident memory of `trtserve run` before and after POST /admin/sleep, and after /admin/wake_up:
the server first runs long prompts that fill part of its KV cache (on CPU the cache's pages are
taken on first write, so only what was used is resident), then sleeps, then wakes and answers again.

    .venv/bin/python scripts/bench_sleep.py engines/smollm2-135m --threads 2
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from peers.server import free_port, running

MiB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-cache-memory", default="2GiB")
    ap.add_argument("--prompts", type=int, default=8, help="long prompts run at once before sleeping")
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "trtserve.cli", "run", args.engine, "--port", str(port), "--state-dir", "none"]
    cmd += ["--kv-cache-memory", args.kv_cache_memory]
    with (
        tempfile.TemporaryDirectory() as tmp,
        running(
            cmd, f"{url}/v2/health/ready", Path(tmp) / "server.log", {"OMP_NUM_THREADS": str(args.threads)}
        ) as proc,
    ):
        rss = psutil.Process(proc.pid)
        model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        rng = random.Random(0)

        def complete(n: int) -> None:
            prompt = [rng.randrange(100, 40000) for _ in range(n)]
            body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0.0, "ignore_eos": True}
            httpx.post(f"{url}/v1/completions", json=body, timeout=600).raise_for_status()

        idle = rss.memory_info().rss
        with ThreadPoolExecutor(args.prompts) as pool:
            list(pool.map(complete, [args.prompt_tokens] * args.prompts))
        before = rss.memory_info().rss
        slept = httpx.post(f"{url}/admin/sleep", timeout=120).json()
        asleep = rss.memory_info().rss
        woke = httpx.post(f"{url}/admin/wake_up", timeout=120).json()
        awake = rss.memory_info().rss
        complete(32)
        print(f"{args.engine}, --kv-cache-memory {args.kv_cache_memory}, {args.threads} threads")
        print(f"RSS idle after start:                      {idle / MiB:8.0f} MiB")
        print(f"RSS after {args.prompts} x {args.prompt_tokens}-token prompts:        {before / MiB:8.0f} MiB")
        print(f"RSS asleep (sleep took {slept['seconds']:.2f} s):               {asleep / MiB:8.0f} MiB")
        print(f"RSS awake again (wake_up took {woke['seconds']:.2f} s):        {awake / MiB:8.0f} MiB")


if __name__ == "__main__":
    main()
