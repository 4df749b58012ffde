"""`trtserve build MODEL -o ENGINE_DIR`."""

from __future__ import annotations

from pathlib import Path

import click

from trtserve.build.config import load_build_config
from trtserve.errors import UserError
from trtserve.quant.formats import FORMATS, KV_FORMATS, help_text


@click.command("build")
@click.argument("model", required=False)
@click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path), help="Engine dir to write.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML build config (see configs/).")
@click.option(
    "--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), help="Weight and compute dtype [auto]."
)
@click.option("--tp-size", type=int, help="Tensor-parallel ranks of the TensorRT-LLM checkpoint [1].")
@click.option("--max-batch-size", type=int, help="Most sequences in one engine step [256].")
@click.option("--max-seq-len", type=int, help="Longest prompt + output in tokens [the model's context].")
@click.option("--max-num-tokens", type=int, help="Most tokens in one engine step [8192].")
@click.option("--tokens-per-block", type=int, help="KV-cache block size in tokens, a power of two [32].")
@click.option(
    "--backend",
    type=click.Choice(["torch", "tensorrt", "trtllm"]),
    help="torch (embedded engine), tensorrt (TensorRT engines, TensorRT-LLM <= 1.2) or trtllm "
    "(TensorRT-LLM's PyTorch backend, >= 1.0) [torch].",
)
@click.option("--dry-run", is_flag=True, help="tensorrt/trtllm: print the plan and the trtllm-build/serve commands.")
@click.option("--quant", type=click.Choice(list(FORMATS)), help=f"Quantize with NVIDIA ModelOpt; {help_text()}.")
@click.option("--kv-cache-quant", type=click.Choice(list(KV_FORMATS)), help="8-bit KV cache (needs --quant).")
@click.option(
    "--group-size",
    type=click.Choice(["64", "128"]),
    callback=lambda _ctx, _param, v: None if v is None else int(v),
    help="Inputs per int4 scale for w4a16 / w4a16_awq; 64 fits models whose widths are not multiples of 128 [128].",
)
@click.option(
    "--smoothquant-alpha",
    type=float,
    help="w8a8_sq: how much activation range SmoothQuant moves into the weights, 0-1 [0.5].",
)
@click.option("--calib-size", type=int, help="Calibration windows [32].")
@click.option("--calib-seq-len", type=int, help="Tokens per calibration window [256].")
@click.option(
    "--calib-data",
    type=click.Path(path_type=Path),
    help="Calibration text, .txt or .jsonl with a 'text' field [docstrings of the Python standard library].",
)
@click.option("--force", is_flag=True, help="Replace an existing engine dir.")
@click.option("--quiet", is_flag=True, help="No progress bars (for CI logs).")
def command(
    model: str | None, output: Path, config_file: Path | None, force: bool, quiet: bool, dry_run: bool, **flags
) -> None:
    """Convert MODEL (a Hugging Face dir, a .gguf file, or `smollm2-135m`) into an engine dir."""
    from trtserve.build.builder import build_engine

    cfg = load_build_config(config_file, {"model": model, **flags})
    if cfg.backend == "torch":
        if dry_run:
            raise UserError("--dry-run plans TensorRT-LLM builds; add --backend tensorrt or --backend trtllm")
        build_engine(cfg, output, force=force, quiet=quiet)
        return
    from trtserve.build import trtllm_build

    if dry_run:
        click.echo(trtllm_build.describe(trtllm_build.plan(cfg), output))
        click.echo("dry run: nothing was written")
        return
    trtllm_build.build(cfg, output, force=force, quiet=quiet)
    click.echo(f"{cfg.backend} engine dir written to {output}", err=True)
