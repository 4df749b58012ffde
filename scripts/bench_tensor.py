"""Tensor models through `trtserve run`: dynamic batching on vs off, the per-request server overhead,
and an ensemble as one call vs its steps as separate calls. One run, baselines in the same run; run it
alone (nothing else on the machine), since the client shares the CPUs with the server.

    .venv/bin/python scripts/bench_tensor.py [--threads 2] [--requests 1500] [--out results.json]

- The MLP 256 -> 1024 -> 10 (tests/tensor_models.py; `--sizes`) is served twice from one repository,
  the same graph and config but for `dynamic_batching` (mlp_batched, `--queue-delay-us`, default 0)
  or none (mlp_single); both on `--threads` intra-op threads. Throughput at concurrency 1 and 32 over
  KServe REST and gRPC (trtserve.bench.tensor's closed-loop sweep; `--rounds`, the median kept), and
  the ratio batched / single at 32; with each, the server process's CPU time per request (less
  sensitive than wall time to whatever else runs, and it says what bounds throughput on these cores).
- Per-request overhead at concurrency 1: the p50 latency of one one-row request through the official
  synchronous clients (tritonclient.http, binary tensors; tritonclient.grpc) minus onnxruntime's p50
  for the same request in this process, with the same thread count.
- examples/tensor-repo's image_classifier ensemble (preprocess -> classifier -> postprocess): one
  ensemble call vs the three step models called in the config's order by the client, p50 and throughput at
  concurrency 1 and 8, on one PNG.

The in-process baseline runs before the server starts; then this process (every client) drops to
`--client-nice` (default 19), since a real load generator runs on another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "examples" / "tensor-repo")]

WARMUP = 20  # untimed requests before each timed level
MLP_CONFIG = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 64
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {n_in} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {n_out} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{threads}" }} }}
{batching}"""


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "unknown")


def build_repo(dest: Path, threads: int, sizes: tuple[int, ...], delay_us: int) -> bool:
    """The MLP twice, plus the image ensemble when examples/tensor-repo is there; True if it is."""
    from tensor_models import mlp_onnx

    try:
        from make_repo import make_repo

        make_repo(dest)
        ensemble = True
    except ImportError:
        dest.mkdir(parents=True)
        ensemble = False
    batched = f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"
    for name, batching in (("mlp_batched", batched), ("mlp_single", "")):
        mlp_onnx(dest / name / "1" / "model.onnx", sizes=sizes, seed=0)
        text = MLP_CONFIG.format(name=name, threads=threads, batching=batching, n_in=sizes[0], n_out=sizes[-1])
        (dest / name / "config.pbtxt").write_text(text)
    return ensemble


class Server:
    """`trtserve run REPO` as a subprocess (HTTP and gRPC), stopped by its pid."""

    def __init__(self, repo: Path, threads: int, log: Path):
        self.port, self.grpc_port = free_port(), free_port()
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        cmd = [sys.executable, "-m", "trtserve.cli", "run", str(repo), "--port", str(self.port)]
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd + ["--grpc-port", str(self.grpc_port)], stdout=self.log, stderr=subprocess.STDOUT, env=env
        )
        self.url, self.grpc_url = f"127.0.0.1:{self.port}", f"127.0.0.1:{self.grpc_port}"

    def wait_ready(self, models: list[str], timeout: float = 180) -> None:
        import httpx

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"trtserve run exited; see {self.log.name}")
            try:
                codes = [httpx.get(f"http://{self.url}/v2/models/{m}/ready", timeout=2).status_code for m in models]
                if all(c == 200 for c in codes):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise SystemExit(f"the models were not ready in {timeout:.0f} s; see {self.log.name}")

    def cpu_seconds(self) -> float:
        """CPU time the server process has used (user + system; Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p50_ms(fn, n: int) -> float:
    for _ in range(min(50, n)):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1000)


def one_row(features: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, features)).astype(np.float32)


def onnxruntime_p50(onnx_path: Path, threads: int, n: int) -> tuple[float, np.ndarray]:
    """p50 ms of one row in process (the server's session options), and its output."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
    x = one_row(sess.get_inputs()[0].shape[1])
    return p50_ms(lambda: sess.run(None, {"x": x}), n), sess.run(None, {"x": x})[0]


def overheads(server: Server, baseline_ms: float, features: int, want: np.ndarray, n: int) -> dict:
    """p50 of one one-row request through each synchronous client, to each model."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    x = one_row(features)
    out: dict = {"onnxruntime_p50_ms": baseline_ms, "server_side": {}}
    http = httpclient.InferenceServerClient(server.url, network_timeout=30)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    hin = httpclient.InferInput("x", [1, features], "FP32")
    hin.set_data_from_numpy(x, binary_data=True)
    gin = grpcclient.InferInput("x", [1, features], "FP32")
    gin.set_data_from_numpy(x)

    def server_ms(model: str) -> tuple[int, int, int]:
        """The model's (successful requests, their ns in the server, ns executing) so far."""
        (e,) = http.get_inference_statistics(model)["model_stats"]
        stats = e["inference_stats"]
        return stats["success"]["count"], stats["success"]["ns"], stats["compute_infer"]["ns"]

    for model in ("mlp_batched", "mlp_single"):
        got_h = http.infer(model, [hin]).as_numpy("y")
        got_g = grpc.infer(model, [gin], client_timeout=30).as_numpy("y")
        assert np.allclose(got_h, want, atol=1e-5) and np.allclose(got_g, want, atol=1e-5), "outputs differ"
        for proto, fn in (("http", lambda m=model: http.infer(m, [hin])),
                          ("grpc", lambda m=model: grpc.infer(m, [gin], client_timeout=30))):  # fmt: skip
            before = server_ms(model)
            out[f"{proto}_{model}_p50_ms"] = p50_ms(fn, n)
            count, ns, infer_ns = (a - b for a, b in zip(server_ms(model), before, strict=True))
            out["server_side"][f"{proto}_{model}"] = {
                "request_ms": ns / count / 1e6,
                "execute_ms": infer_ns / count / 1e6,
            }
    http.close()
    grpc.close()
    return out


async def mlp_sweeps(server: Server, n: int, rounds: int) -> dict:
    """Each (protocol, model, concurrency) cell `rounds` times, the models alternating, so a passing
    load on the machine hits both; each cell keeps the round with the median throughput."""
    from trtserve.bench.tensor import open_target, sweep
    from trtserve.bench.tensor_inputs import plan_inputs

    runs: dict[tuple[str, str, int], list[dict]] = {}
    for backend, url in (("kserve", server.url), ("grpc", server.grpc_url)):
        target = open_target(backend, url, timeout=60, connections=32)
        try:
            for _ in range(rounds):
                for model in ("mlp_batched", "mlp_single"):
                    plans = plan_inputs(await target.metadata(model), 64)
                    for c, k in ((1, max(100, n // 5)), (32, n)):
                        cpu = server.cpu_seconds()
                        (level,) = (await sweep(target, model, plans, 64, [c], k, warmup=WARMUP))["levels"]
                        level["server_cpu_ms_per_request"] = (server.cpu_seconds() - cpu) * 1000 / (k + WARMUP)
                        runs.setdefault((backend, model, c), []).append(level)
        finally:
            await target.close()
    out: dict = {}
    for (backend, model, _), levels in runs.items():
        ranked = sorted(levels, key=lambda lv: lv["inference_throughput"])
        median = ranked[len(ranked) // 2] | {"rounds": [lv["inference_throughput"] for lv in levels]}
        out.setdefault(f"{backend}/{model}", []).append(median)
    return out


def png_bytes(size: int = 64) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


async def ensemble_vs_steps(server: Server, n: int) -> dict:
    """image_classifier as one call vs its steps as separate client calls (outputs compared once)."""
    from trtserve.bench.tensor import open_target, run_level

    target = open_target("kserve", server.url, timeout=60, connections=8)
    try:
        return await _ensemble_vs_steps(target, run_level, n)
    finally:
        await target.close()


async def _ensemble_vs_steps(target, run_level, n: int) -> dict:
    image = np.array([[png_bytes()]], dtype=np.object_)  # (batch 1, 1)
    config = await target.config("image_classifier")
    steps = config["ensemble_scheduling"]["step"]
    types = {}
    for step in steps:
        meta = await target.metadata(step["model_name"])
        types[step["model_name"]] = {t["name"]: t["datatype"] for t in meta["inputs"]}
    one_call = target.prepare({"image_bytes": image}, {"image_bytes": "BYTES"})

    async def steps_call(i: int) -> dict:
        tensors = {"image_bytes": image}
        for step in steps:
            name = step["model_name"]
            arrays = {k: tensors[v] for k, v in step["input_map"].items()}
            result = await target.infer(name, target.prepare(arrays, types[name]))
            tensors |= {v: result.as_numpy(k) for k, v in step["output_map"].items()}
        return tensors

    async def ensemble_call(i: int) -> dict:
        result = await target.infer("image_classifier", one_call)
        return {"labels": result.as_numpy("labels")}

    a, b = (await steps_call(0))["labels"], (await ensemble_call(0))["labels"]
    assert np.array_equal(a, b), f"the ensemble answered {b}, its steps {a}"
    out: dict = {}
    for name, fn in (("ensemble", ensemble_call), ("three_calls", steps_call)):

        async def call(i: int, fn=fn) -> str | None:
            try:
                await fn(i)
            except target.errors as err:
                return str(err)
            return None

        for c, k in ((1, max(50, n // 10)), (8, max(100, n // 3))):
            await run_level(call, 10, c)  # warm-up
            run = await run_level(call, k, c)
            out[f"{name}/c{c}"] = {
                "p50_ms": float(np.median(run.latencies) * 1000),
                "throughput": len(run.latencies) / run.duration,
                "failed": len(run.errors),
            }
    return out


def report(r: dict) -> None:
    print(f"server threads {r['threads']}; onnxruntime {r['onnxruntime']}; client nice {r['client_nice']}; "
          f"load average before the run {r['load']:.2f}")  # fmt: skip
    print(f"\nMLP {' -> '.join(map(str, r['sizes']))}, one row per request (inferences/s; p50 ms; average batch; "
          "server CPU ms per request):")  # fmt: skip
    for key, levels in r["mlp"].items():
        cells = "  ".join(f"c{lv['concurrency']}: {lv['inference_throughput']:7.1f}/s p50 {lv['p50_latency_ms']:6.2f}"
                          f" batch {lv['avg_batch_size'] or 0:4.2f} cpu {lv['server_cpu_ms_per_request']:.2f}"
                          for lv in levels)  # fmt: skip
        print(f"  {key:22s} {cells}")
    for backend in ("kserve", "grpc"):
        on, off = r["mlp"][f"{backend}/mlp_batched"][-1], r["mlp"][f"{backend}/mlp_single"][-1]
        ratio = on["inference_throughput"] / off["inference_throughput"]
        r[f"{backend}_batching_ratio_c32"] = ratio
        print(f"  {backend}: batching on / off at concurrency 32 = {ratio:.2f}x (target >= 4x)")
    o = r["overhead"]
    print(f"\nPer-request overhead at concurrency 1 (onnxruntime in process p50 {o['onnxruntime_p50_ms']:.3f} ms):")
    for key in [k for k in o if k.endswith("_p50_ms") and k != "onnxruntime_p50_ms"]:
        name = key.removesuffix("_p50_ms")
        extra = o[key] - o["onnxruntime_p50_ms"]
        r.setdefault("overhead_ms", {})[name] = extra
        side = o["server_side"][name]
        print(f"  {name:18s} p50 {o[key]:6.3f} ms  overhead {extra:6.3f} ms (target <= 2 ms); server's mean "
              f"{side['request_ms']:.3f} ms a request, {side['execute_ms']:.3f} ms executing")  # fmt: skip
    if r.get("ensemble"):
        print("\nimage_classifier: one ensemble call vs three client calls (KServe REST, one PNG per request):")
        for key, v in r["ensemble"].items():
            print(f"  {key:16s} p50 {v['p50_ms']:7.2f} ms  {v['throughput']:8.1f} req/s  failed {v['failed']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of the server and the baseline")
    ap.add_argument("--requests", type=int, default=1500, help="requests at concurrency 32 (fewer at lower levels)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the MLP sweeps (median kept)")
    ap.add_argument("--sizes", default="256,1024,10", help="the MLP's layer widths")
    ap.add_argument("--queue-delay-us", type=int, default=0, help="mlp_batched's max_queue_delay_microseconds")
    ap.add_argument("--client-nice", type=int, default=19, help="niceness of this process (the clients)")
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    import onnxruntime

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    r: dict = {"cpu": cpu_model(), "threads": args.threads, "onnxruntime": onnxruntime.__version__}
    r["client_nice"] = args.client_nice
    r["sizes"] = sizes = tuple(int(v) for v in args.sizes.split(","))
    r["queue_delay_us"] = args.queue_delay_us
    r["load"] = os.getloadavg()[0]  # anything else running shares the CPUs with the server
    print(f"CPU: {r['cpu']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        ensemble = build_repo(repo, args.threads, sizes, args.queue_delay_us)
        baseline_ms, want = onnxruntime_p50(repo / "mlp_single" / "1" / "model.onnx", args.threads, 2000)
        server = Server(repo, args.threads, Path(tmp) / "server.log")
        try:
            server.wait_ready(["mlp_batched", "mlp_single"] + (["image_classifier"] if ensemble else []))
            os.nice(args.client_nice)  # the load generator would run elsewhere: let the server have the CPUs
            r["overhead"] = overheads(server, baseline_ms, sizes[0], want, 1000)
            r["mlp"] = asyncio.run(mlp_sweeps(server, args.requests, args.rounds))
            r["ensemble"] = asyncio.run(ensemble_vs_steps(server, args.requests)) if ensemble else None
        finally:
            server.stop()
    report(r)
    if args.out:
        args.out.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
