"""`trtserve run ENGINE_DIR`: serve an engine over HTTP (OpenAI API and KServe v2), and gRPC (Triton) when asked."""

from __future__ import annotations

import os
from pathlib import Path

import click

from trtserve.cli.image_limits import image_limit_options, pop_image_limits
from trtserve.cli.kv_offload import kv_cache_dtype_option, kv_offload_option, with_kv_offload
from trtserve.cli.lora import lora_option
from trtserve.cli.speculative import speculative_options, with_speculative


@click.command("run")
@click.argument("engine_dir", metavar="ENGINE_DIR|REPO_DIR", type=click.Path(path_type=Path))
@click.option("--host", help="Address to listen on [127.0.0.1].")
@click.option("--port", type=int, help="Port [8000].")
@click.option(
    "--grpc-port", type=int, help="Also serve Triton's gRPC protocol on this port (needs trtserve[grpc]) [off]."
)
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML run config (see configs/).")
@click.option("--model-name", help="Model name clients use [the engine dir's name].")
@click.option("--api-key", help="Require `Authorization: Bearer KEY` (or set TRTSERVE_API_KEY).")
@click.option("--admin-key", help="Bearer key of admin routes: receipts, cache invalidation (or TRTSERVE_ADMIN_KEY).")
@click.option(
    "--receipts",
    type=click.Choice(["off", "on", "hashes"]),
    help="Store a receipt of every generation; `hashes` keeps only the prompt's sha256 [off].",
)
@click.option(
    "--model-control-mode",
    type=click.Choice(["none", "explicit"]),
    help="REPO_DIR: load each policy.yaml's versions at start (none), or only when asked (explicit) [none].",
)
@lora_option("Also serve the PEFT LoRA adapter in DIR as model NAME (the `lora` engine option; repeatable).")
@speculative_options
@click.option("--kv-cache-memory", help="KV-cache budget, e.g. 2GiB [CPU: at most 4GiB; CUDA: half of free memory].")
@kv_cache_dtype_option
@kv_offload_option
@click.option("--max-queued-requests", type=int, help="Waiting requests before 429 [256].")
@click.option("--request-timeout", type=float, help="Default per-request deadline in seconds [600].")
@click.option(
    "--state-dir",
    help="Where batches, uploaded files and Idempotency-Keys persist; `none` turns them off "
    "[~/.local/share/trtserve/<model name>].",
)
@click.option("--batch-max-in-flight", type=int, help="Batch API requests generating at once [4].")
@click.option(
    "--reasoning-parser", help="Split replies into reasoning and answer: think, harmony, none [the chat template's]."
)
@click.option(
    "--tool-call-parser",
    help="Tool-call format: hermes, qwen3_coder, llama3_json, pythonic, mistral, harmony, deepseek_v3 [the template's].",
)
@click.option(
    "--default-chat-template-kwargs",
    callback=lambda ctx, param, v: _json_object(v, "--default-chat-template-kwargs"),
    help="Template variables of every chat request, as JSON, e.g. '{\"enable_thinking\": false}'.",
)
@click.option(
    "--allowed-media-domains",
    callback=lambda ctx, param, v: [d.strip().lower() for d in v.split(",") if d.strip()] if v else None,
    help="Domains whose http(s) image URLs the server may fetch, comma-separated (docs/vision.md) [none: data: URLs only].",
)
@image_limit_options
@click.option(
    "--otlp-traces-endpoint",
    help="Send OpenTelemetry traces to this OTLP endpoint, e.g. http://127.0.0.1:4317 (needs trtserve[otel]) [off].",
)
@click.option(
    "--access-log-format",
    type=click.Choice(["json", "text"]),
    help="The access log's line per request: JSON, or the same fields as one readable line [json].",
)
@click.option(
    "--ray",
    "use_ray",
    is_flag=True,
    help="Serve through Ray Serve replicas (needs trtserve[ray]); RAY_ADDRESS joins a cluster.",
)
@click.option("--replicas", type=int, help="With --ray: this many replicas, one engine each [autoscale].")
@click.option("--min-replicas", type=int, help="With --ray: autoscale down to this many [1].")
@click.option("--max-replicas", type=int, help="With --ray: autoscale up to this many [1].")
def command(
    engine_dir: Path,
    config_file: Path | None,
    kv_cache_memory: str | None,
    kv_cache_dtype: str | None,
    lora: dict[str, str] | None,
    speculative: str | None,
    speculative_tokens: int | None,
    kv_offload: str | None,
    **flags,
) -> None:
    """Serve ENGINE_DIR, or a model repository REPO_DIR/<model>/<version>/ of engine dirs: /v1 (OpenAI),
    /v2 (KServe, Triton generate and repository), /admin (`trtserve repo`), /metrics, /health; gRPC with --grpc-port."""
    from trtserve.cli.preflight import Preflight

    check = Preflight(engine_dir)  # hashes the engine files while the imports below run
    from trtserve.serve.config import load_serve_config
    from trtserve.serve.server import serve

    flags["api_key"] = flags.get("api_key") or os.environ.get("TRTSERVE_API_KEY")
    flags["admin_key"] = flags.get("admin_key") or os.environ.get("TRTSERVE_ADMIN_KEY")
    engine = {"kv_cache_memory": kv_cache_memory, "kv_cache_dtype": kv_cache_dtype}
    flags["engine"] = {k: v for k, v in engine.items() if v} or None
    flags["image_limits"] = pop_image_limits(flags)
    ray_flags = {k: flags.pop(k) for k in ("use_ray", "replicas", "min_replicas", "max_replicas")}
    cfg = load_serve_config(config_file, flags)
    if lora:
        cfg = with_adapters(cfg, lora)
    cfg = with_speculative(cfg, speculative, speculative_tokens)
    cfg = with_kv_offload(cfg, kv_offload)
    use_ray = ray_flags.pop("use_ray")
    if not use_ray and any(v is not None for v in ray_flags.values()):
        raise click.UsageError("--replicas, --min-replicas and --max-replicas need --ray")
    if ray_flags["replicas"] is not None and (ray_flags["min_replicas"], ray_flags["max_replicas"]) != (None, None):
        raise click.UsageError("give either --replicas N (fixed) or --min-replicas/--max-replicas (autoscaling)")
    # A missing, foreign or damaged engine, or a backend that cannot run here, fails now, before serving.
    # In a repository each version is checked when it loads: a bad one is UNAVAILABLE, the rest serve.
    check.check(cfg.engine.kv_cache_dtype)
    if use_ray:
        return _run_ray(engine_dir, cfg, ray_flags)
    serve(engine_dir, cfg)


def _json_object(value: str | None, flag: str) -> dict | None:
    import json

    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise click.BadParameter(f"{flag} takes a JSON object, e.g. '{{\"enable_thinking\": false}}'")
    return parsed


def with_adapters(cfg, adapters: dict[str, str]):
    """The run config with --lora's adapters added to its `lora` engine option (made if unset)."""
    from pydantic import ValidationError

    from trtserve.engine.adapters import LoraConfig
    from trtserve.engine.errors import UserError

    base = cfg.engine.lora or LoraConfig()
    for name in adapters.keys() & base.adapters.keys():
        raise UserError(f"adapter {name} is in the run config's engine.lora.adapters and given to --lora; name it once")
    try:
        lora = LoraConfig.model_validate(base.model_dump() | {"adapters": base.adapters | adapters})
    except ValidationError as err:  # a name that cannot be a model name
        raise UserError(f"--lora: {err.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"lora": lora})})


def _run_ray(engine_dir: Path, cfg, flags: dict) -> None:
    import importlib.util

    from trtserve.engine.errors import UserError

    if importlib.util.find_spec("ray") is None:
        raise UserError("--ray needs Ray Serve, which is not installed; pip install 'trtserve[ray]'")
    from trtserve.deploy.ray import run
    from trtserve.deploy.settings import RaySettings

    most = flags["max_replicas"] or max(flags["min_replicas"] or 1, 1)
    settings = RaySettings(
        replicas=flags["replicas"],
        min_replicas=1 if flags["min_replicas"] is None else flags["min_replicas"],
        max_replicas=most,
        address=os.environ.get("RAY_ADDRESS"),
    )
    run(engine_dir, cfg, settings)
