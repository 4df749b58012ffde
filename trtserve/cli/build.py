"""`trtserve build MODEL -o ENGINE_DIR`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from trtserve.build.config import KEEP_GGUF, NO_QUANT, load_build_config
from trtserve.cli.lora import lora_option
from trtserve.engine.backends import BACKENDS
from trtserve.models import quant_formats
from trtserve.tensor.onnx_graph import DEFAULT_MAX_BATCH_SIZE


class RegistryChoice(click.Choice):
    """A choice among names read from a registry when parsing, so a format registered at run time counts."""

    def __init__(self, names: Callable[[], list[str]]):
        self._names = names
        super().__init__([])

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._names())

    @choices.setter
    def choices(self, _value) -> None:
        pass  # click.Choice.__init__ assigns it; the registry is the source


def quant_help() -> str:
    """The formats for --help: which ones run the calibration text."""
    recipes = [r for s in quant_formats.QUANT_FORMATS.values() if s.source is None for r in s.recipes]
    cal = ", ".join(r.name for r in recipes if r.calibrated)
    plain = ", ".join(r.name for r in recipes if not r.calibrated)
    kept = ", ".join(
        f"{r.name} ({r.summary})" for s in quant_formats.QUANT_FORMATS.values() if s.source for r in s.recipes
    )
    return (
        f"Quantize with NVIDIA ModelOpt, calibrated with --calib-data text: {cal} (and any --kv-cache-quant); "
        f"weights only: {plain}; no ModelOpt: {kept}; {NO_QUANT}: unquantized, a GGUF's weights dequantized "
        f"[{KEEP_GGUF} for a .gguf MODEL with quantized tensors where it can be kept, else {NO_QUANT}]"
    )


@click.command("build")
@click.argument("model", required=False)
@click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path), help="Engine dir to write.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML build config (see configs/).")
@click.option(
    "--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), help="Weight and compute dtype [auto]."
)
@click.option("--tp-size", type=int, help="Tensor-parallel ranks of the TensorRT-LLM checkpoint [1].")
@click.option(
    "--max-batch-size",
    type=int,
    help=f"Most sequences in one engine step [256]; a .onnx MODEL: most requests in one batch [{DEFAULT_MAX_BATCH_SIZE}].",
)
@click.option("--max-seq-len", type=int, help="Longest prompt + output in tokens [the model's context].")
@click.option("--max-num-tokens", type=int, help="Most tokens in one engine step [8192].")
@click.option("--tokens-per-block", type=int, help="KV-cache block size in tokens, a power of two [32].")
@click.option(
    "--backend",
    type=click.Choice([*BACKENDS, "onnxruntime"]),
    help="; ".join(f"{b.name}: {b.summary}" for b in BACKENDS.values())
    + " [torch]; for a .onnx MODEL: onnxruntime (its default) or tensorrt (a trtexec plan).",
)
@click.option("--dry-run", is_flag=True, help="tensorrt/trtllm: print the plan and the trtllm-build/serve commands.")
@click.option(
    "--trtllm-version",
    metavar="X.Y|main",
    help="tensorrt/trtllm: plan for this TensorRT-LLM release (1.0, 1.1, 1.2 or main) [the installed one, else 1.2].",
)
@click.option(
    "--quant",
    type=RegistryChoice(lambda: [*quant_formats.quant_names(), NO_QUANT]),
    help=f"{quant_help()}.",
)
@click.option(
    "--kv-cache-quant", type=RegistryChoice(quant_formats.kv_cache_names), help="8-bit KV cache (needs --quant)."
)
@click.option(
    "--group-size",
    type=click.Choice([str(g) for g in sorted(quant_formats.GROUP_SIZES)]),
    callback=lambda _ctx, _param, v: None if v is None else int(v),
    help=f"Inputs per int4 scale ({', '.join(quant_formats.grouped_names())}); 64 fits models whose widths "
    f"are not multiples of 128 [{quant_formats.GROUP_SIZES[0]}].",
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
@lora_option(
    "Pack the PEFT LoRA adapter in DIR into the engine dir, served as NAME (torch and TensorRT-LLM backends; repeatable)."
)
@click.option(
    "--pooling",
    type=click.Choice(["embed", "classify", "rerank"]),
    help="Build a pooling model (docs/pooling.md) [from the architecture: *Model embeds, *ForSequenceClassification classifies].",
)
@click.option(
    "--pooling-method", type=click.Choice(["last", "mean"]), help="embed: pool the last token or the mean [last]."
)
@click.option("--force", is_flag=True, help="Replace an existing engine dir.")
@click.option("--quiet", is_flag=True, help="No progress bars (for CI logs).")
@click.option(
    "--lock",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write an engine.lock here (inputs, toolchain, every file's sha256) for `trtserve check --lock`.",
)
def command(
    model: str | None,
    output: Path,
    config_file: Path | None,
    force: bool,
    quiet: bool,
    dry_run: bool,
    lock: Path | None,
    **flags,
) -> None:
    """Convert MODEL (a Hugging Face dir, a .gguf file, `smollm2-135m`, or a .onnx tensor model) into an engine dir."""
    from trtserve.build import tensor

    if dry_run and lock is not None:
        raise click.UsageError("--lock records a built engine's files; drop --dry-run or --lock")
    if tensor.is_onnx_source(model):
        _build_onnx(model, output, config_file, force, quiet, dry_run, lock, flags)
        return
    from trtserve.build import builder

    if flags.get("backend") == "onnxruntime":
        raise click.UsageError("--backend onnxruntime builds a .onnx MODEL; give one, or another --backend")
    cfg = load_build_config(None, _config_file_settings(config_file) | _given({"model": model, **flags}))
    if dry_run:
        click.echo(builder.dry_run(cfg, output))
        click.echo("dry run: nothing was written")
        return
    builder.build_engine(cfg, output, force=force, quiet=quiet, lock=lock)


def _build_onnx(model: str, output: Path, config_file, force, quiet, dry_run, lock, flags: dict) -> None:
    """A .onnx MODEL: a tensor-model engine dir (trtserve/build/tensor.py); LLM settings do not apply."""
    from trtserve.build import tensor

    llm_only = [k for k, v in flags.items() if v is not None and k not in ("max_batch_size", "backend")]
    if config_file is not None:
        llm_only.insert(0, "config")
    if llm_only:
        names = ", ".join("--" + k.replace("_", "-") for k in llm_only)
        raise click.UsageError(
            f"{names}: LLM builds only; a .onnx MODEL takes --max-batch-size, --backend onnxruntime|tensorrt, "
            "--dry-run, --force and --lock"
        )
    backend = flags.get("backend") or "onnxruntime"
    if backend not in tensor.TENSOR_BACKENDS:
        raise click.UsageError(
            f"--backend {backend} builds LLM checkpoints; a .onnx MODEL builds for onnxruntime or tensorrt"
        )
    build = tensor.plan(model, backend, flags.get("max_batch_size"))
    if dry_run:
        click.echo(tensor.dry_run(build, output))
        click.echo("dry run: nothing was written")
        return
    if lock is not None and not Path(lock).resolve().parent.is_dir():
        raise click.UsageError(f"--lock {lock}: its directory does not exist; create it or write the lock elsewhere")
    manifest = tensor.build_tensor_engine(build, output, force=force, quiet=quiet)
    if lock is not None:
        from trtserve.build.builder import write_lock

        write_lock(manifest, Path(lock))


def _config_file_settings(config_file: Path | None) -> dict:
    """The --config file's build settings. A `trtserve check` config is a build config plus the
    check's own keys (target, checks), so one file serves both commands; those are dropped here."""
    from trtserve.check.settings import CHECK_KEYS
    from trtserve.engine.config_file import read_yaml

    data = read_yaml(config_file) if config_file is not None else {}
    return {k: v for k, v in data.items() if k not in CHECK_KEYS}


def _given(flags: dict) -> dict:
    """The flags given on the command line (None: not given); they win over the file."""
    return {k: v for k, v in flags.items() if v is not None}
