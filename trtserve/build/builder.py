"""`trtserve build`: checkpoint in -> verified engine dir out, for every backend.

    plan = planner.resolve(cfg, strategy)     what to build; reads metadata only, writes nothing
    job = strategy.prepare(plan)              every check that can fail before writing
    job.write(staged dir)                     the backend's files (build/strategies.py)
    + tokenizer/, config.json, manifest.json  here, the same for every backend

The engine dir is written atomically (build/output.py): nothing is left behind on any failure.
With `lock`, an engine.lock is written beside it once it is in place (`trtserve check --lock`).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from trtserve.build.adapters import check_adapters, pack_adapters
from trtserve.build.config import BuildConfig
from trtserve.build.gguf_default import quantized_types
from trtserve.build.gguf_reader import GGUFReader
from trtserve.build.output import check_target, staged_dir
from trtserve.build.planner import BuildPlan, resolve
from trtserve.build.pooling import write_pooling_head
from trtserve.build.strategies import STRATEGIES
from trtserve.build.vision import write_vision
from trtserve.engine.backends import BACKENDS
from trtserve.engine.errors import UserError
from trtserve.engine.layout import ENGINE_CONFIG, TOKENIZER_DIR, EngineConfig
from trtserve.engine.manifest import Manifest, write_manifest
from trtserve.engine.model_config import ModelConfig

LOCK_VERSION = 1  # engine.lock's format


@dataclass
class BuildResult:
    engine_dir: Path
    model: ModelConfig  # as built (with `quantization` if quantized)
    weight_bytes: int  # bytes of model.safetensors (what the torch engine loads); 0 for other backends
    checkpoint_bytes: int  # bytes of all rank files; 0 for trtllm


def plan_build(cfg: BuildConfig) -> BuildPlan:
    """The resolved plan of a build (what --dry-run prints); UserError for anything that cannot work."""
    return resolve(cfg, STRATEGIES[cfg.backend])


def dry_run(cfg: BuildConfig, out: Path) -> str:
    """The plan as text: what would be built, the resolved settings, the equivalent commands."""
    strategy = STRATEGIES[cfg.backend]
    if not strategy.has_dry_run:
        raise UserError("--dry-run plans TensorRT-LLM builds; add --backend tensorrt or --backend trtllm")
    p = resolve(cfg, strategy)
    header = [
        f"plan: {p.backend} engine dir {out} for {p.model.architecture} from {p.reader.description}",
        f"  dtype {p.model.dtype}, tp_size {p.config.tp_size}, quantization {json.dumps(p.quantization)}",
        "  resolved build config: " + json.dumps(p.config.model_dump(mode="json"), sort_keys=True),
    ]
    return "\n".join(header + strategy.describe(p, out))


def _dequantized_note(plan: BuildPlan, weight_bytes: int) -> str | None:
    """A quantized GGUF built without --quant that could not be kept: what was dequantized, why, and the cost."""
    if plan.dequantized is None or not isinstance(plan.reader, GGUFReader):
        return None
    stored = sum(n for _, n in plan.reader.tensor_bytes().values())
    cost = f" ({weight_bytes / max(stored, 1):.1f}x the file's tensor bytes)" if weight_bytes else ""
    return (
        f"note: the GGUF's {', '.join(quantized_types(plan.reader))} weights were dequantized to "
        f"{plan.model.dtype}{cost}: {plan.dequantized} (docs/quantization.md)"
    )


def build_engine(
    cfg: BuildConfig, out: Path, *, force: bool = False, quiet: bool = False, lock: Path | None = None
) -> BuildResult:
    """Build the engine dir `out` for `cfg.backend` (and its engine.lock at `lock`); `cfg` is not changed."""
    console = Console(stderr=True, quiet=quiet)
    strategy = STRATEGIES[cfg.backend]
    check_adapters(cfg)
    plan = resolve(cfg, strategy)
    check_target(out, force)
    if lock is not None and not Path(lock).resolve().parent.is_dir():
        raise UserError(f"--lock {lock}: its directory does not exist; create it or write the lock elsewhere")
    job = strategy.prepare(plan)
    m = plan.model
    console.print(
        f"[bold]Building[/] {m.architecture} from {plan.reader.description} as {m.dtype}, "
        f"tp={plan.config.tp_size}, for the {plan.backend} backend"
    )
    with staged_dir(out, force) as tmp:
        plan.reader.save_tokenizer(tmp / TOKENIZER_DIR)
        written = job.write(tmp, console)
        if plan.pooling is not None:
            write_pooling_head(tmp, plan.pooling, plan.reader, written.model)
        if plan.vision is not None:
            write_vision(tmp, plan.vision, plan.reader, written.model.dtype)
        write_engine_config(tmp, written.model, plan)
        pack_adapters(tmp, plan.config, written.model, None if plan.vision is None else plan.vision.family)
        manifest = write_manifest(
            tmp,
            backend=plan.backend,
            target_device=BACKENDS[plan.backend].target_device,
            source=plan.source(),
            toolchain=toolchain_versions(),
            build_config=plan.config.model_dump(mode="json"),
            target=job.target,
            pooling=plan.pooling,
            vision=plan.vision,
        )
    weights = f" ({written.weight_bytes / 2**20:.1f} MiB of weights)" if written.weight_bytes else ""
    console.print(f"[green]Engine written to[/] {out}{weights}")
    if (note := _dequantized_note(plan, written.weight_bytes)) is not None:
        console.print(note)
    if lock is not None:
        write_lock(manifest, Path(lock))
        console.print(f"[green]Lock written to[/] {lock}")
    return BuildResult(out, written.model, written.weight_bytes, written.checkpoint_bytes)


def write_engine_config(tmp: Path, model: ModelConfig, plan: BuildPlan) -> None:
    import trtserve

    cfg = EngineConfig(version=f"trtserve-{trtserve.__version__}", pretrained_config=model, build_config=plan.limits)
    (tmp / ENGINE_CONFIG).write_text(json.dumps(cfg.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")


def toolchain_versions() -> dict[str, str]:
    """manifest.json's `toolchain`: the versions that built the engine."""
    from importlib.metadata import version

    import torch
    import transformers

    import trtserve

    return {
        "trtserve": trtserve.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": version("safetensors"),
        "python": platform.python_version(),
    }


def engine_lock(manifest: Manifest) -> dict:
    """engine.lock: what `trtserve check --lock` compares later builds with. The inputs (source
    fingerprint, resolved build config), the toolchain, and every file's sha256: the manifest
    less its time stamp, so two builds of the same inputs lock alike."""
    return {
        "lock_version": LOCK_VERSION,
        "backend": manifest.backend,
        "source": manifest.source,
        "toolchain": manifest.toolchain,
        "target": manifest.target,  # tensorrt / trtllm: the TensorRT-LLM host; None for torch
        "build_config": manifest.build_config,
        "files": {rel: entry.sha256 for rel, entry in sorted(manifest.files.items())},
    }


def write_lock(manifest: Manifest, path: Path) -> None:
    """Write engine.lock atomically (a reader never sees half a lock)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(engine_lock(manifest), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
