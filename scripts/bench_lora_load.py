"""The time to load a LoRA adapter at run time through `POST /v1/load_lora_adapter` on a live server.

    .venv/bin/python scripts/bench_lora_load.py [--rank 16] [--threads 2] [--loads 5]

SmolLM2-135M (the packaged GGUF, nothing downloaded) built into a temp engine dir and served by
`trtserve run --lora a0=DIR` (so the `lora` option is on); random rank-r adapters on every projection
(bench_lora.py's). Each load is a new adapter, timed from the request to the answer: hashing, reading,
checking, converting, in the engine thread between two steps. The first request under it is timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_lora import write_adapter  # noqa: E402

from trtserve.build.builder import build_engine  # noqa: E402
from trtserve.build.config import BuildConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lora-load-"))
    engine = work / "engine"
    build_engine(BuildConfig(model="smollm2-135m", dtype="float32", quant="none", max_seq_len=2048), engine, quiet=True)
    cfg = json.loads((engine / "config.json").read_text())["pretrained_config"]
    dirs = [write_adapter(work / f"a{i}", cfg, args.rank, i) for i in range(args.loads + 1)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    (work / "run.yaml").write_text(f"engine:\n  lora:\n    max_lora_rank: {args.rank}\n")
    cmd = [
        sys.executable,
        "-m",
        "trtserve.cli",
        "run",
        str(engine),
        "--port",
        str(port),
        "--config",
        str(work / "run.yaml"),
    ]
    cmd += ["--kv-cache-memory", "256MiB", "--state-dir", "none", f"--lora=a0={dirs[0]}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    with open(work / "server.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_ready(url, proc)
        loads, firsts = [], []
        for i, path in enumerate(dirs[1:], 1):
            start = time.perf_counter()
            r = httpx.post(
                f"{url}/v1/load_lora_adapter", json={"lora_name": f"a{i}", "lora_path": str(path)}, timeout=60
            )
            loads.append(time.perf_counter() - start)
            r.raise_for_status()
            start = time.perf_counter()
            body = {"model": f"a{i}", "prompt": "Hello", "max_tokens": 1, "temperature": 0}
            httpx.post(f"{url}/v1/completions", json=body, timeout=60).raise_for_status()
            firsts.append(time.perf_counter() - start)
        print(f"SmolLM2-135M float32, {args.threads} threads, rank-{args.rank} adapters on all 7 projections:")
        print(
            f"  POST /v1/load_lora_adapter: median {statistics.median(loads):.3f} s, best {min(loads):.3f} s, worst {max(loads):.3f} s ({len(loads)} loads)"
        )
        print(f"  first 1-token completion under it: median {statistics.median(firsts):.3f} s")
    finally:
        proc.terminate()
        proc.wait(30)


def _wait_ready(url: str, proc: subprocess.Popen) -> None:
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited; see its log")
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not get ready in 300 s")


if __name__ == "__main__":
    main()
