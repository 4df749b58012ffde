"""`trtserve build --lora NAME=DIR`: PEFT LoRA adapters checked against the model and packed into the engine
dir (lora/NAME/), where the manifest pins them like every other file and the engine serves them."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from trtserve.build.config import BuildConfig
from trtserve.engine.adapters import adapter_files, adapter_ref
from trtserve.engine.errors import UserError
from trtserve.engine.layout import LORA_DIR
from trtserve.engine.model_config import ModelConfig
from trtserve.models.lora import load_lora
from trtserve.models.registry import family_for_trtllm
from trtserve.models.vision_family import vision_family_named

NO_RANK_LIMIT = 1 << 20  # the run's lora.max_lora_rank applies when the engine is served


def check_adapters(cfg: BuildConfig) -> None:
    """Before anything is built: a backend that serves packed adapters, names usable as model names,
    dirs in PEFT's format."""
    if not cfg.lora:
        return
    if cfg.backend not in ("torch", "tensorrt", "trtllm"):  # TensorRT-LLM: backends/tensorrt_llm/lora.py
        raise UserError(
            f"--lora packs adapters for the torch and TensorRT-LLM backends, not {cfg.backend}; "
            "build without --lora, or with --backend torch"
        )
    for name, path in cfg.lora.items():
        adapter_ref(name, path)  # UserError for a bad name or a dir that is not PEFT's


def pack_adapters(dest: Path, cfg: BuildConfig, model: ModelConfig, vision: str | None = None) -> None:
    """Check each adapter against the built model (targets, layers, shapes) and copy its two files to
    dest/lora/NAME/. vision: a vision-language model's family (VisionConfig.family): adapters on its language model."""
    family, vision_family = family_for_trtllm(model.architecture), vision_family_named(vision)
    for name, path in cfg.lora.items():
        ref = adapter_ref(name, path)
        load_lora(ref, Path(path), family, model, NO_RANK_LIMIT, torch.float32, torch.device("cpu"), vision_family)
        out = dest / LORA_DIR / name
        out.mkdir(parents=True)
        for filename, src in adapter_files(Path(path)).items():
            shutil.copyfile(src, out / filename)
