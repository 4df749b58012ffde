"""`trtserve build`: checkpoint in -> verified engine dir out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtserve.build.config import BuildConfig
from trtserve.build.convert import (
    assert_each_source_used_once,
    check_source,
    check_tp,
    checkpoint_specs,
    engine_specs,
)
from trtserve.build.layout import (
    CHECKPOINT_DIR,
    ENGINE_CONFIG,
    ENGINE_WEIGHTS,
    TOKENIZER_DIR,
    EngineBuildConfig,
    EngineConfig,
    PluginConfig,
    rank_file,
)
from trtserve.build.manifest import write_manifest
from trtserve.build.output import staged_dir
from trtserve.build.safetensors_io import write_safetensors
from trtserve.build.source import open_checkpoint
from trtserve.errors import UserError
from trtserve.models.config import ModelConfig
from trtserve.quant.build import build_quantized
from trtserve.quant.checks import check_quant


@dataclass
class BuildResult:
    engine_dir: Path
    model: ModelConfig
    weight_bytes: int  # bytes of model.safetensors (what the torch engine loads)
    checkpoint_bytes: int  # bytes of all rank files


def resolve_limits(cfg: BuildConfig, model: ModelConfig) -> EngineBuildConfig:
    limit = model.max_position_embeddings
    scaling = model.rotary_scaling or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        limit = int(limit * float(scaling.get("factor", 1.0)))
    max_seq_len = cfg.max_seq_len or limit
    if max_seq_len > limit:
        raise UserError(f"--max-seq-len {max_seq_len} exceeds the model's context of {limit} tokens; lower it")
    return EngineBuildConfig(
        max_batch_size=cfg.max_batch_size,
        max_input_len=max_seq_len - 1,
        max_seq_len=max_seq_len,
        max_num_tokens=cfg.max_num_tokens,
        plugin_config=PluginConfig(tokens_per_block=cfg.tokens_per_block, gpt_attention_plugin=model.dtype),
    )


def build_engine(cfg: BuildConfig, out: Path, *, force: bool = False, quiet: bool = False) -> BuildResult:
    import trtserve

    if not cfg.model:
        raise UserError("no MODEL given; pass it as an argument or set `model:` in the --config file")
    console = Console(stderr=True, quiet=quiet)
    reader = open_checkpoint(cfg.model)
    dtype = reader.auto_dtype if cfg.dtype == "auto" else cfg.dtype
    if cfg.quant and cfg.dtype == "auto" and dtype == "float32":
        dtype = "bfloat16"  # quantized checkpoints keep their unquantized tensors in 16 bits
    model = reader.family.model_config(reader.hf_config, dtype)
    model.mapping.tp_size = model.mapping.world_size = cfg.tp_size
    check_tp(model, cfg.tp_size)
    check_quant(model, cfg)
    limits = resolve_limits(cfg, model)
    expected = check_source(reader, model)
    ranks = [checkpoint_specs(model, reader, r, cfg.tp_size) for r in range(cfg.tp_size)]
    assert_each_source_used_once(ranks[0], expected, model)
    weights = engine_specs(model, reader)
    resolved = cfg.model_copy(update={"dtype": dtype, "max_seq_len": limits.max_seq_len, "model": str(reader.path)})
    console.print(f"[bold]Building[/] {model.architecture} from {reader.description} as {dtype}, tp={cfg.tp_size}")

    with staged_dir(out, force) as tmp:
        (tmp / CHECKPOINT_DIR).mkdir()
        if cfg.quant:
            reader.save_tokenizer(tmp / TOKENIZER_DIR)
            ckpt_bytes, weight_bytes = build_quantized(reader, model, cfg, tmp, tmp / TOKENIZER_DIR, console, quiet)
            ranks = weights = []  # written above
        (tmp / CHECKPOINT_DIR / "config.json").write_text(_dump(model.to_trtllm()))
        total = sum(len(r) for r in ranks) + len(weights)  # 0 when quantized (written above)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=quiet or not total,
        ) as bar:
            task = bar.add_task("converting tensors", total=total)
            step = lambda: bar.advance(task)  # noqa: E731
            if not cfg.quant:
                ckpt_bytes = sum(write_safetensors(tmp / rank_file(r), s, step) for r, s in enumerate(ranks))
                weight_bytes = write_safetensors(tmp / ENGINE_WEIGHTS, weights, step)
        if not cfg.quant:
            reader.save_tokenizer(tmp / TOKENIZER_DIR)
        engine_cfg = EngineConfig(
            version=f"trtserve-{trtserve.__version__}", pretrained_config=model, build_config=limits
        )
        (tmp / ENGINE_CONFIG).write_text(_dump(engine_cfg.model_dump(mode="json")))
        write_manifest(
            tmp,
            backend=cfg.backend,
            target_device="cpu",
            source={"kind": type(reader).__name__, "path": str(reader.path), "fingerprint": reader.fingerprint()},
            build_config=resolved.model_dump(mode="json"),
        )
    console.print(f"[green]Engine written to[/] {out} ({weight_bytes / 2**20:.1f} MiB of weights)")
    return BuildResult(out, model, weight_bytes, ckpt_bytes)


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
