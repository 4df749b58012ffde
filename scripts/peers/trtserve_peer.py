"""trtserve through its HTTP server: `python -m trtserve.cli run ENGINE` as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from peers.server import drive, free_port, running, warm_up

MODEL_NAME = "model"


def build_engine(
    source: str, out: Path, dtype: str, tokens_per_block: int, log: Path, quant: str | None = None
) -> Path:
    """`trtserve build SOURCE -o OUT --dtype DTYPE --tokens-per-block N --quant Q|none`, once: an existing
    engine dir is reused. No Q: `none`, so a quantized GGUF is dequantized, the weights HF and llama.cpp's
    conversions of it run (a GGUF's own quantization is Q `gguf`)."""
    if (out / "manifest.json").exists():
        return out
    cmd = [sys.executable, "-m", "trtserve.cli", "build", source, "-o", str(out), "--dtype", dtype, "--quiet"]
    cmd += ["--tokens-per-block", str(tokens_per_block), "--quant", quant or "none"]
    with open(log, "wb") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"trtserve build failed (exit {rc}); see {log}")
    return out


def serve_and_run(
    engine: Path,
    runs: list[dict],
    *,
    prefix_caching: bool,
    kv_cache_memory: str,
    log: Path,
    seed: int,
    engine_options: dict | None = None,
    serve_options: dict | None = None,
    env: dict[str, str] | None = None,
):
    """Start one server and do `runs` (dicts: name, requests, max_concurrency, request_rate) in order.

    Returns {name: BenchRun}. Prefix caching is turned off through the run config's engine section,
    to which engine_options (RuntimeConfig fields) are added; serve_options are run-config fields of the
    server (e.g. otlp_traces_endpoint), env its extra environment.
    """
    port = free_port()
    cfg = {"engine": {"enable_prefix_caching": prefix_caching, **(engine_options or {})}, "max_queued_requests": 100000}
    cfg |= serve_options or {}
    cfg_file = log.with_suffix(".yaml")
    cfg_file.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "trtserve.cli", "run", str(engine), "--port", str(port), "--config", str(cfg_file)]
    cmd += ["--model-name", MODEL_NAME, "--kv-cache-memory", kv_cache_memory]
    url = f"http://127.0.0.1:{port}"
    out = {}
    with running(cmd, url + "/v2/health/ready", log, env):
        warm_up(url, MODEL_NAME)
        for r in runs:
            out[r["name"]] = drive(
                url,
                MODEL_NAME,
                r["requests"],
                max_concurrency=r["max_concurrency"],
                request_rate=r["request_rate"],
                seed=seed,
            )
    return out
