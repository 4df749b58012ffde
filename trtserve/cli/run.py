"""`trtserve run ENGINE_DIR`: serve an engine over HTTP (OpenAI API and KServe v2), and gRPC (Triton) when asked."""

from __future__ import annotations

import os
from pathlib import Path

import click


@click.command("run")
@click.argument("engine_dir", type=click.Path(path_type=Path))
@click.option("--host", help="Address to listen on [127.0.0.1].")
@click.option("--port", type=int, help="Port [8000].")
@click.option(
    "--grpc-port", type=int, help="Also serve Triton's gRPC protocol on this port (needs trtserve[grpc]) [off]."
)
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML run config (see configs/).")
@click.option("--model-name", help="Model name clients use [the engine dir's name].")
@click.option("--api-key", help="Require `Authorization: Bearer KEY` (or set TRTSERVE_API_KEY).")
@click.option("--kv-cache-memory", help="KV-cache budget, e.g. 2GiB [CPU: at most 4GiB; CUDA: half of free memory].")
@click.option("--max-queued-requests", type=int, help="Waiting requests before 429 [256].")
@click.option("--request-timeout", type=float, help="Default per-request deadline in seconds [600].")
def command(engine_dir: Path, config_file: Path | None, kv_cache_memory: str | None, **flags) -> None:
    """Serve ENGINE_DIR: /v1 (OpenAI), /v2 (KServe, Triton generate), /metrics, /health; gRPC with --grpc-port."""
    from trtserve.engine.open import preflight
    from trtserve.serve.config import load_serve_config
    from trtserve.serve.server import serve

    flags["api_key"] = flags.get("api_key") or os.environ.get("TRTSERVE_API_KEY")
    if kv_cache_memory:
        flags["engine"] = {"kv_cache_memory": kv_cache_memory}
    cfg = load_serve_config(config_file, flags)
    # A missing, foreign or damaged engine, or a backend that cannot run here, fails now, before serving.
    preflight(engine_dir)
    serve(engine_dir, cfg)
