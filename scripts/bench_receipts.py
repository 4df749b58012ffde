"""The cost of receipts: (1) what a request pays on the response path and what the recorder's
thread commits per second, in-process; (2) server throughput with --receipts on vs off, two
servers on one engine, benchmarked in alternating rounds (same run, interleaved).

    python scripts/bench_receipts.py ENGINE_DIR [--rounds 3] [-n 32] [--input-len 128] [--output-len 64]

Prints one JSON object. Thread count: OMP_NUM_THREADS / torch's default, as the servers inherit.
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
from types import SimpleNamespace

import httpx


def _micro(n: int = 2000) -> dict:
    """Response-path cost (ReceiptBook.finish) and commit rate, on a real state store."""
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.request_options import RequestOptions
    from trtserve.engine.sampling import SamplingParams, TokenLogprob
    from trtserve.serve.receipts.book import ReceiptBook
    from trtserve.serve.receipts.model import EngineIdentity
    from trtserve.serve.receipts.recorder import ReceiptRecorder
    from trtserve.state import StateStore
    from trtserve.text.outputs import CompletionOutput, RequestOutput

    identity = EngineIdentity(
        fingerprint="f" * 64,
        backend="torch",
        platform="trtserve_torch",
        backend_version="x",
        trtserve_version="x",
        deterministic=False,
    )
    book = ReceiptBook(identity, "on")
    svc = SimpleNamespace(model_name="m", version="1")
    lps = [TokenLogprob(7, -0.5, 1, []) for _ in range(128)]
    out = RequestOutput("c", list(range(128)), [CompletionOutput(0, list(range(128)), "", lps, "length")])

    def run(i):
        req = GenerateRequest(
            list(range(128)), SamplingParams(seed=i, max_tokens=128, logprobs=0), RequestOptions(client_id=f"c{i}")
        )
        return SimpleNamespace(
            req=req,
            output=out,
            service=svc,
            receipt_id=f"rcpt-{i}",
            created_at=time.time(),
            protocol="http",
            ttft=0.01,
            queued=0.001,
            e2e=0.5,
            preemptions=0,
        )

    runs = [run(i) for i in range(n)]
    with tempfile.TemporaryDirectory() as d:
        store = StateStore(Path(d))
        recorder = ReceiptRecorder(store)
        t0 = time.perf_counter()
        for r in runs:
            book.finish(r, True, recorder)
        t1 = time.perf_counter()
        recorder.close()
        t2 = time.perf_counter()
        rows = store.query_one("SELECT count(*) AS n FROM receipts")["n"]
        size = store.path.stat().st_size + Path(str(store.path) + "-wal").stat().st_size
        store.close()
    return {
        "receipts": n,
        "prompt_and_output_tokens_each": 128,
        "response_path_us_per_receipt": round((t1 - t0) / n * 1e6, 2),
        "commit_receipts_per_s": round(n / (t2 - t0)),
        "committed": rows,
        "db_bytes_per_receipt": round(size / n),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(engine: Path, receipts: str, state: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "trtserve.cli", "run", str(engine), "--port", str(port), "--receipts", receipts]
    cmd += ["--state-dir", str(state), "--kv-cache-memory", "1GiB"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(log.read_text()[-2000:])
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError("server not ready")


def _bench(url: str, model: str, engine: Path, args, out: Path) -> dict:
    cmd = [sys.executable, "-m", "trtserve.cli", "bench", "--base-url", url, "--model", model, "-n", str(args.n)]
    cmd += ["--input-len", str(args.input_len), "--output-len", str(args.output_len), "--tokenizer", str(engine)]
    cmd += ["--max-concurrency", str(args.concurrency), "--json", str(out), "--no-progress", "--no-stream"]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--micro-only", action="store_true")
    args = ap.parse_args()
    result: dict = {"micro": _micro(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "torch default")}
    if not args.micro_only:
        tmp = Path(tempfile.mkdtemp(prefix="bench-receipts-"))
        servers = {
            mode: _serve(args.engine, mode, tmp / f"state-{mode}", tmp / f"{mode}.log") for mode in ("off", "on")
        }
        model = args.engine.resolve().name
        tput: dict[str, list[float]] = {"off": [], "on": []}
        try:
            for i in range(args.rounds):
                for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):  # alternate who goes first
                    s = _bench(servers[mode][1], model, args.engine, args, tmp / f"{mode}-{i}.json")
                    tput[mode].append(s["output_throughput"])
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
        result["throughput_tok_s"] = tput
        off, on = statistics.median(tput["off"]), statistics.median(tput["on"])
        result["median_on_vs_off"] = round(on / off, 3)
        result["workload"] = vars(args) | {"engine": str(args.engine)}
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
