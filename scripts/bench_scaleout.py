"""Figures for docs/scaling-out.md, all in one run on this machine:

1. throughput of plain `trtserve run` vs Ray Serve with 1 and 2 replicas on a mixed (ShareGPT-like)
   workload, interleaved round by round so both see the same background load;
2. prefix-cache hit rate with prefix-affinity routing vs Ray's default (power of two choices) on a
   shared-prefix workload, each on fresh replicas (read from every response's usage.cached_tokens,
   so it counts all replicas, which one scrape of /metrics through the proxy would not);
3. how long a killed replica takes to be replaced and ready.

    .venv/bin/python scripts/bench_scaleout.py ENGINE_DIR [--rounds 3] [--json out.json]

Every server runs torch with one thread (OMP_NUM_THREADS=1); Ray gets 2 CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from trtserve.bench.workload import shared_prefix, sharegpt_like


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up")


async def run_workload(url: str, model: str, reqs, concurrency: int) -> dict:
    """Non-streamed completions of token-id prompts; returns tokens/s and cache hits from usage."""
    sem = asyncio.Semaphore(concurrency)
    totals = {"completion": 0, "prompt": 0, "cached": 0, "errors": 0}
    async with httpx.AsyncClient(timeout=300) as client:

        async def one(r):
            async with sem:
                body = {
                    "model": model,
                    "prompt": r.prompt,
                    "max_tokens": r.output_len,
                    "temperature": 0,
                    "ignore_eos": True,
                }
                resp = await client.post(f"{url}/v1/completions", json=body)
                if resp.status_code != 200:
                    totals["errors"] += 1
                    return
                u = resp.json()["usage"]
                totals["completion"] += u["completion_tokens"]
                totals["prompt"] += u["prompt_tokens"]
                totals["cached"] += (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)

        start = time.monotonic()
        await asyncio.gather(*(one(r) for r in reqs))
        wall = time.monotonic() - start
    return totals | {
        "wall_s": wall,
        "tokens_per_s": totals["completion"] / wall,
        "hit_rate": totals["cached"] / max(1, totals["prompt"]),
    }


def deploy(engine: Path, **settings) -> None:
    from ray import serve

    from trtserve.deploy.ray import APP_NAME, build_app
    from trtserve.deploy.settings import RaySettings
    from trtserve.serve.config import ServeConfig

    cfg = ServeConfig(engine={"kv_cache_memory": "64MiB"})
    serve.run(build_app(engine, cfg, RaySettings(replica_cpus=0.5, **settings)), name=APP_NAME, route_prefix="/")


def replica_names() -> set[str]:
    import ray

    from trtserve.deploy.ray import REPLICA

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if REPLICA in a["name"]}


def kill_and_time(ray_url: str) -> float:
    """Seconds from killing one replica to its replacement answering as part of the pool."""
    import ray
    from ray import serve

    from trtserve.deploy.ray import APP_NAME, REPLICA

    victim = sorted(replica_names())[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    killed = time.monotonic()
    while True:
        names = replica_names()
        dep = serve.status().applications[APP_NAME].deployments[REPLICA]
        running = {str(getattr(k, "value", k)): v for k, v in dep.replica_states.items()}.get("RUNNING", 0)
        if victim not in names and len(names) == 2 and running == 2:
            return time.monotonic() - killed
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    engine = args.engine.resolve()
    model = engine.name
    os.environ["OMP_NUM_THREADS"] = "1"
    mixed = sharegpt_like(48, vocab_size=300, seed=1, max_input_len=96, max_total_len=160)
    port = free_port()
    plain = subprocess.Popen(
        [sys.executable, "-m", "trtserve.cli", "run", str(engine), "--port", str(port), "--kv-cache-memory", "64MiB"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    plain_url = f"http://127.0.0.1:{port}"
    import ray
    from ray import serve

    out: dict = {"cpu": _cpu(), "torch_threads": 1, "rounds": args.rounds, "concurrency": args.concurrency}
    try:
        wait_ready(plain_url)
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        )
        ray_port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": ray_port})
        ray_url = f"http://127.0.0.1:{ray_port}"
        for replicas in (1, 2):
            deploy(engine, replicas=replicas, prefix_affinity=False)
            wait_ready(ray_url)
            rounds = []
            for _ in range(args.rounds):  # interleaved: plain, ray, plain, ray, ...
                p = asyncio.run(run_workload(plain_url, model, mixed, args.concurrency))
                r = asyncio.run(run_workload(ray_url, model, mixed, args.concurrency))
                rounds.append(
                    {"plain": p["tokens_per_s"], "ray": r["tokens_per_s"], "errors": p["errors"] + r["errors"]}
                )
            out[f"mixed_ray_{replicas}_replicas"] = rounds
            print(f"mixed, Ray {replicas} replica(s) vs plain, tokens/s per round: {rounds}", flush=True)
        prefixed = shared_prefix(8, 8, prefix_len=64, question_len=(4, 12), output_len=4, vocab_size=300, seed=2)
        for affinity in (True, False):
            serve.delete("trtserve")  # fresh replicas: cold prefix caches
            deploy(engine, replicas=2, prefix_affinity=affinity)
            wait_ready(ray_url)
            r = asyncio.run(run_workload(ray_url, model, prefixed, args.concurrency))
            out[f"shared_prefix_affinity_{affinity}"] = r
            print(
                f"shared prefix, affinity={affinity}: hit rate {r['hit_rate']:.3f}, {r['tokens_per_s']:.1f} tok/s",
                flush=True,
            )
        one = asyncio.run(run_workload(plain_url, model, prefixed, args.concurrency))
        out["shared_prefix_single_server"] = one
        print(f"shared prefix, one plain server (upper bound): hit rate {one['hit_rate']:.3f}", flush=True)
        out["replica_replaced_s"] = [kill_and_time(ray_url) for _ in range(2)]
        print(f"killed replica replaced after {out['replica_replaced_s']} s", flush=True)
    finally:
        plain.send_signal(signal.SIGINT)
        plain.wait(30)
        serve.shutdown()
        ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


def _cpu() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
