"""The quantized tensors step of `trtserve build`: ModelOpt quantizes and exports, then the export
is converted into TensorRT-LLM checkpoint tensors, the torch engine's weights and the checkpoint's
`quantization` section. Writes nothing into the engine dir and changes none of its inputs."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from trtserve.engine.model_config import ModelConfig, Quantization
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.quant_formats import by_name, kv_by_name
from trtserve.quant.convert import engine_tensors, trtllm_tensors
from trtserve.quant.request import QuantRequest, TensorSource


@dataclass
class QuantizedTensors:
    quantization: Quantization  # checkpoint/config.json's `quantization`
    checkpoint: dict[str, torch.Tensor]  # TensorRT-LLM rank 0 (tp=1), fused parts requantized
    engine_weights: dict[str, torch.Tensor] | None  # the torch engine's model.safetensors; None: not asked for


def quantization_config(hf_quant: dict) -> Quantization:
    """checkpoint/config.json's `quantization`, as NVIDIA's TensorRT-LLM exporter writes it."""
    q = {k: v for k, v in hf_quant.items() if k not in ("exclude_modules",)}
    return Quantization(**q, exclude_modules=["lm_head"])


def quantize(
    reader: TensorSource,
    model: ModelConfig,
    cfg: QuantRequest,
    scratch: Path,
    tokenizer_dir: Path,
    console: Console,
    *,
    engine_weights: bool,
) -> QuantizedTensors:
    """Calibrate and quantize the source as `cfg` asks (scratch: a dir for ModelOpt's export,
    removed again); the torch engine's weights only with `engine_weights`."""
    spec, _ = by_name(cfg.quant)
    kv_algo = kv_by_name(cfg.kv_cache_quant).kv_cache_quant_algo if cfg.kv_cache_quant else None
    hf_quant, hf = _export(reader, model, cfg, scratch, tokenizer_dir, console)
    expected = (spec.exported_as, kv_algo)
    got = (hf_quant.get("quant_algo"), hf_quant.get("kv_cache_quant_algo"))
    if got != expected:
        raise AssertionError(f"ModelOpt exported {got}, expected {expected}")
    ckpt = trtllm_tensors(hf, reader.family, model, spec.quant_algo, kv_algo)
    weights = None
    if engine_weights:
        unfused = trtllm_tensors(hf, reader.family, model, spec.quant_algo, kv_algo, requant=False)
        weights = engine_tensors(unfused, reader.family, model)
    return QuantizedTensors(quantization_config(hf_quant | {"quant_algo": spec.quant_algo}), ckpt, weights)


def _export(
    reader: TensorSource, model: ModelConfig, cfg: QuantRequest, scratch: Path, tokenizer_dir: Path, console
) -> tuple[dict, dict[str, torch.Tensor]]:
    """ModelOpt's hf_quant_config `quantization` and every tensor of its HF export (KV scales included)."""
    from transformers import AutoTokenizer

    from trtserve.quant import modelopt_driver as mo

    dtype = TORCH_DTYPES[model.dtype]
    hf_model = mo.load_hf_model(reader, model.architecture, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    kv = cfg.kv_cache_quant
    console.print(f"[bold]Quantizing[/] to {cfg.quant}" + (f" with a {kv} KV cache" if kv else ""))
    mo.quantize(hf_model, tokenizer, cfg, console, console.quiet)
    kv_scales = mo.export(hf_model, dtype, scratch)
    del hf_model
    try:
        hf_quant = json.loads((scratch / "hf_quant_config.json").read_text())["quantization"]
        if kv_scales:  # ModelOpt's export refuses INT8 KV caches, so the driver returned their scales
            hf_quant["kv_cache_quant_algo"] = kv_by_name(kv).kv_cache_quant_algo
        return hf_quant, read_export(scratch) | kv_scales
    finally:
        shutil.rmtree(scratch)


def read_export(export_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a ModelOpt HF export (one file or shards)."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(export_dir.glob("*.safetensors")):
        out |= load_file(str(path))
    return out
