"""Online TTFT with and without a Batch API job running, in one run, interleaved (issue 17).

    trtserve run ENGINE --state-dir /tmp/s --port 8017 &
    python scripts/batch_ttft.py --url http://127.0.0.1:8017 --lines 500 --rounds 3 --requests 30

Each round: `--requests` sequential streamed online completions with the server otherwise idle
("alone"), then a `--lines`-line batch is submitted and, once it is generating, the same number
of online requests ("with batch"); the batch is then cancelled and the engine let go idle.
TTFT is taken at the client: from sending the request to the first streamed token's text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import httpx


def ttft(client: httpx.Client, prompt: str) -> float:
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True, "ignore_eos": True}
    start = time.perf_counter()
    with client.stream("POST", "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                first = time.perf_counter() - start
                for _ in lines:  # read the stream to its end
                    pass
                return first
    raise RuntimeError("no token came back")


def submit(client: httpx.Client, lines: int, max_tokens: int) -> str:
    rows = [
        {
            "custom_id": f"l{i}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": f"Batch line {i} about model servers", "max_tokens": max_tokens, "ignore_eos": True},
        }
        for i in range(lines)
    ]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    f = client.post("/v1/files", files={"file": ("b.jsonl", data)}, data={"purpose": "batch"}).json()
    b = client.post("/v1/batches", json={"input_file_id": f["id"], "endpoint": "/v1/completions"}).json()
    while True:  # until lines are generating
        got = client.get(f"/v1/batches/{b['id']}").json()
        if got["status"] == "in_progress" and got["request_counts"]["completed"] >= 2:
            return b["id"]
        time.sleep(0.05)


def flood(url: str, concurrency: int, max_tokens: int, stop: threading.Event) -> None:
    """The control: the batch's kind of work sent as ordinary online requests, `concurrency` at once."""

    def one(i: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as c:
            while not stop.is_set():
                body = {"prompt": f"Flood line {i} about model servers", "max_tokens": max_tokens, "ignore_eos": True}
                c.post("/v1/completions", json=body)

    for i in range(concurrency):
        threading.Thread(target=one, args=(i,), daemon=True).start()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=64, help="per batch line")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30, help="online requests per window")
    ap.add_argument("--flood", type=int, default=0, help="also: that many concurrent online requests as the load")
    args = ap.parse_args()
    client = httpx.Client(base_url=args.url, timeout=600)
    alone: list[float] = []
    busy: list[float] = []
    flooded: list[float] = []
    done_lines = 0
    for r in range(args.rounds):
        alone += [ttft(client, f"Online request {r}-{i}") for i in range(args.requests)]
        bid = submit(client, args.lines, args.max_tokens)
        busy += [ttft(client, f"Online request {r}-{i} during") for i in range(args.requests)]
        b = client.get(f"/v1/batches/{bid}").json()
        done_lines += b["request_counts"]["completed"]
        still = b["status"] == "in_progress"
        client.post(f"/v1/batches/{bid}/cancel")
        while client.get(f"/v1/batches/{bid}").json()["status"] not in ("cancelled", "completed"):
            time.sleep(0.1)
        print(f"round {r}: batch {'still running' if still else 'ENDED'} during the window", flush=True)
        if args.flood:
            stop = threading.Event()
            flood(args.url, args.flood, args.max_tokens, stop)
            time.sleep(1.0)
            flooded += [ttft(client, f"Online request {r}-{i} flood") for i in range(args.requests)]
            stop.set()
            time.sleep(2.0)
    rows = [("alone", alone), ("with batch", busy)] + ([(f"flood x{args.flood}", flooded)] if args.flood else [])
    for name, xs in rows:
        ms = [x * 1000 for x in xs]
        print(
            f"{name:>10}: n={len(ms)} p50={statistics.median(ms):.1f} ms p99={pct(ms, 0.99):.1f} ms max={max(ms):.1f} ms"
        )
    print(f"batch lines completed during the 'with batch' windows: {done_lines}")


if __name__ == "__main__":
    main()
