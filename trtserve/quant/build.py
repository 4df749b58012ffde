"""The quantized part of `trtserve build`: ModelOpt quantizes and exports, then the export is
converted into the engine dir's TensorRT-LLM checkpoint and torch-engine weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from rich.console import Console

from trtserve.build.config import BuildConfig
from trtserve.build.layout import ENGINE_WEIGHTS, rank_file
from trtserve.build.reader import CheckpointReader
from trtserve.build.safetensors_io import SafetensorsFile, write_safetensors
from trtserve.models.config import TORCH_DTYPES, ModelConfig, Quantization
from trtserve.quant.convert import as_specs, engine_tensors, trtllm_tensors
from trtserve.quant.formats import FORMATS, KV_FORMATS

_EXPORT_DIR = ".modelopt-export"  # inside the staged engine dir, removed before it is published


def quantization_config(hf_quant: dict) -> Quantization:
    """checkpoint/config.json's `quantization`, as NVIDIA's TensorRT-LLM exporter writes it."""
    q = {k: v for k, v in hf_quant.items() if k not in ("exclude_modules",)}
    return Quantization(**q, exclude_modules=["lm_head"])


def build_quantized(
    reader: CheckpointReader,
    model: ModelConfig,
    cfg: BuildConfig,
    tmp: Path,
    tokenizer_dir: Path,
    console: Console,
    quiet: bool,
) -> tuple[int, int]:
    """Writes checkpoint/rank0.safetensors and model.safetensors into `tmp`; sets
    `model.quantization`. Returns (checkpoint bytes, engine weight bytes)."""
    from transformers import AutoTokenizer

    from trtserve.quant import modelopt_driver as mo

    quant, kv_cache_quant = cfg.quant, cfg.kv_cache_quant

    dtype = TORCH_DTYPES[model.dtype]
    hf_model = mo.load_hf_model(reader, model.architecture, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    console.print(f"[bold]Quantizing[/] to {quant}" + (f" with a {kv_cache_quant} KV cache" if kv_cache_quant else ""))
    mo.quantize(hf_model, tokenizer, cfg, console, quiet)
    export_dir = tmp / _EXPORT_DIR
    kv_scales = mo.export(hf_model, dtype, export_dir)
    del hf_model
    hf_quant = json.loads((export_dir / "hf_quant_config.json").read_text())["quantization"]
    if kv_scales:
        hf_quant["kv_cache_quant_algo"] = "INT8"
    expected = (FORMATS[quant].quant_algo, KV_FORMATS[kv_cache_quant][0] if kv_cache_quant else None)
    got = (hf_quant.get("quant_algo"), hf_quant.get("kv_cache_quant_algo"))
    if got != expected:
        raise AssertionError(f"ModelOpt exported {got}, expected {expected}")
    model.quantization = quantization_config(hf_quant)
    hf = read_export(export_dir) | kv_scales
    shutil.rmtree(export_dir)
    layers = model.num_hidden_layers
    ckpt = trtllm_tensors(hf, layers, got[0], got[1])
    if "lm_head.weight" not in ckpt:  # tied: TensorRT-LLM still wants its own copy
        ckpt["lm_head.weight"] = ckpt["transformer.vocab_embedding.weight"]
    weights = engine_tensors(trtllm_tensors(hf, layers, got[0], got[1], requant=False))
    if model.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    ckpt_bytes = write_safetensors(tmp / rank_file(0), as_specs(ckpt))
    weight_bytes = write_safetensors(tmp / ENGINE_WEIGHTS, as_specs(weights))
    return ckpt_bytes, weight_bytes


def read_export(export_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a ModelOpt HF export (one file or shards)."""
    out: dict[str, torch.Tensor] = {}
    for path in sorted(export_dir.glob("*.safetensors")):
        f = SafetensorsFile(path)
        out |= {n: f.load(n) for n in f.keys()}
    return out
