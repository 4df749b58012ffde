"""Measure the resident memory of `trtserve generate` and of `trtserve run` (after start-up, after a load).

    .venv/bin/python scripts/measure_memory.py ENGINE_DIR [--threads 2] [--requests 32] [--max-tokens 64]
        [--kv-cache-memory 2GiB]   # passed to `trtserve run`; default: its own sizing

Prints one JSON line: the peak RSS of `trtserve generate` on two short prompts (from /usr/bin/time),
the server's RSS once ready and after `--requests` concurrent completions, the KV-cache line the
server logged, and the thread count. Run it with nothing else on the machine, or say what was.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

PROMPTS = ["What is the capital of France?", "List three prime numbers."]


def generate_peak_rss(engine: str, env: dict) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "trtserve.cli", "generate", engine, *PROMPTS]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    kv = re.findall(r"KV cache: .*", proc.stderr)
    return {"generate_peak_rss_mib": round(rss_kb / 1024), "generate_kv_lines": kv}


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not become ready in 300 s")


def server_rss(engine: str, env: dict, requests: int, max_tokens: int, kv: str | None) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkstemp(suffix=".log")[1])
    cmd = [sys.executable, "-m", "trtserve.cli", "run", engine, "--port", str(port)]
    cmd += ["--kv-cache-memory", kv] if kv else []
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_ready(url, proc, log)
        ready = psutil.Process(proc.pid).memory_info().rss
        name = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        body = {"model": name, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}

        def one(i: int) -> int:
            prompt = f"Request {i}: write a long story about the sea and the stars."
            r = httpx.post(f"{url}/v1/completions", json=body | {"prompt": prompt}, timeout=600)
            r.raise_for_status()
            return r.json()["usage"]["completion_tokens"]

        with concurrent.futures.ThreadPoolExecutor(requests) as pool:
            tokens = sum(pool.map(one, range(requests)))
        loaded = psutil.Process(proc.pid).memory_info().rss
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    return {
        "run_ready_rss_mib": round(ready / 2**20),
        "run_after_load_rss_mib": round(loaded / 2**20),
        "load": f"{requests} concurrent completions, {tokens} tokens generated",
        "run_kv_lines": re.findall(r"KV cache: .*", log.read_text()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--kv-cache-memory")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    row = {"threads": args.threads, "cpu": _cpu_model()}
    row |= generate_peak_rss(args.engine_dir, env)
    row |= server_rss(args.engine_dir, env, args.requests, args.max_tokens, args.kv_cache_memory)
    print(json.dumps(row))


def _cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    m = re.search(r"Model name:\s*(.*)", out)
    return f"{m.group(1).strip() if m else 'unknown'}, {psutil.cpu_count()} cores"


if __name__ == "__main__":
    main()
