"""`trtllm-build` as 1.0-1.2 have it (gone on main): checks every flag and value it is given and the
checkpoint's config, then writes an engine dir shaped like the real one.

Imitates tensorrt_llm/commands/build.py (flags, enable|disable values, plugin dtypes), plugin/plugin.py
(PluginConfig defaults: use_fp8_context_fmha and use_paged_context_fmha default to enable;
use_fused_mlp is forced off unless quant_algo is None, FP8 or MIXED_PRECISION) and builder.py
(Engine.save: config.json = {version, pretrained_config, build_config{..., plugin_config{...}}}, the
plugin config nested, plus rank{r}.engine). Qwen checkpoints: tensorrt_llm/models/qwen/model.py reads
`config.qwen_type`, which has no default. LoRA (commands/build.py build_model): --lora_dir,
--lora_ckpt_source, --lora_target_modules (choices LoraManager.LORA_MODULE_IDS), --max_lora_rank
(default 64) take effect only with --lora_plugin; build_config.lora_config records them, the target
modules from the first --lora_dir's adapter_config.json when not given.

builder.py's `build()` then rewrites the FMHA flags by quantization and GPU, and refuses some formats on
Blackwell (RuntimeError) — `_builder_rules` below, in upstream's order, asking quantization/mode.py's
QuantMode (quant_mode.py) what each format is, as builder.py does (so W4A8_AWQ is INT4 weight-only). The GPU's SM comes from the
FAKE_TRTLLM_SM environment variable (a test hook standing in for get_sm_version(); default 9.0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from trtllm_fake_core import quant_mode
from trtllm_fake_core.lora import DEFAULT_TRTLLM_TO_HF, LORA_MODULE_IDS, hf_modules

FEATURE = ["enable", "disable"]
PLUGIN = ["auto", "float16", "float32", "bfloat16", "int32", "disable"]
INTS = ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width", "tokens_per_block")
FEATURES = ("context_fmha", "remove_input_padding", "use_paged_context_fmha", "use_fused_mlp", "use_fp8_context_fmha")
PLUGIN_DEFAULTS = {  # plugin/plugin.py
    "gpt_attention_plugin": "auto",
    "gemm_plugin": None,
    "context_fmha": True,
    "remove_input_padding": True,
    "paged_kv_cache": True,
    "tokens_per_block": 32,
    "use_paged_context_fmha": True,
    "use_fp8_context_fmha": True,
    "use_fused_mlp": True,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trtllm-build", allow_abbrev=False)
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--output_dir", default="engine_outputs")
    for name in INTS:
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--kv_cache_type", choices=["continuous", "paged", "disabled"])
    p.add_argument("--gpt_attention_plugin", choices=PLUGIN)
    p.add_argument("--gemm_plugin", choices=PLUGIN + ["fp8", "nvfp4"])
    for name in FEATURES:
        p.add_argument(f"--{name}", choices=FEATURE)
    p.add_argument("--lora_plugin", choices=PLUGIN)
    p.add_argument("--lora_dir", nargs="+")
    p.add_argument("--lora_ckpt_source", default="hf", choices=["hf", "nemo"])
    p.add_argument("--lora_target_modules", nargs="+", choices=LORA_MODULE_IDS)
    p.add_argument("--max_lora_rank", type=int, default=64)
    return p


def _lora_config(args) -> dict:
    for d in args.lora_dir or []:
        if not (Path(d) / "adapter_config.json").is_file():
            sys.exit(f"[TensorRT-LLM][ERROR] {d} has no adapter_config.json")
    modules = args.lora_target_modules or (hf_modules(args.lora_dir[0]) if args.lora_dir else [])
    return {
        "lora_dir": args.lora_dir or [],
        "lora_ckpt_source": args.lora_ckpt_source,
        "max_lora_rank": args.max_lora_rank,
        "lora_target_modules": modules,
        "trtllm_modules_to_hf_modules": {m: DEFAULT_TRTLLM_TO_HF[m] for m in modules},
    }


def _plugin_config(args, ckpt: dict) -> dict:
    pc = dict(PLUGIN_DEFAULTS)
    for name in ("gpt_attention_plugin", "gemm_plugin", "tokens_per_block"):
        if getattr(args, name) is not None:
            pc[name] = getattr(args, name)
    for name in FEATURES:
        if getattr(args, name) is not None:
            pc[name] = getattr(args, name) == "enable"
    pc["paged_kv_cache"] = (args.kv_cache_type or "paged") == "paged"
    pc["lora_plugin"] = None if args.lora_plugin in (None, "disable") else args.lora_plugin
    algo = (ckpt.get("quantization") or {}).get("quant_algo")
    if algo not in (None, "FP8", "MIXED_PRECISION"):
        pc["use_fused_mlp"] = False
    return pc


def _builder_rules(pc: dict, algo: str | None, kv: str | None, sm: int) -> None:
    """builder.py build(): the FMHA flags rewritten in place; RuntimeError on Blackwell for what it refuses."""
    fp8_kv, int8_kv = kv == "FP8", kv == "INT8"
    if not pc["context_fmha"]:
        pc["use_fp8_context_fmha"] = pc["use_paged_context_fmha"] = False
    elif algo not in ("FP8", "W4A8_AWQ", "NVFP4") or sm < 89:
        pc["use_fp8_context_fmha"] = False
        if pc["use_paged_context_fmha"] and fp8_kv:
            pc["use_paged_context_fmha"] = False  # "FP8 Paged Context FMHA is disabled because ..."
    elif pc["use_paged_context_fmha"]:
        pc["use_fp8_context_fmha"] = fp8_kv
    if pc["use_paged_context_fmha"] and int8_kv:
        pc["use_paged_context_fmha"] = False  # "... doesn't work with int8 kv cache currently."
    if 100 <= sm < 120:  # the QuantMode predicates of quantization/mode.py (quant_mode.py)
        mode = quant_mode.from_quant_algo(algo, kv)
        if quant_mode.is_int8_weight_only(mode) or quant_mode.is_int4_weight_only(mode) or "INT8_KV_CACHE" in mode:
            raise RuntimeError("INT8/INT4 quantization is not supported on SM>=100.")
        if quant_mode.has_act_and_weight_quant(mode):
            raise RuntimeError("SmoothQuant is not supported on SM>=100.")
        if mode & {"PER_CHANNEL", "PER_TOKEN"}:
            raise RuntimeError("Per-channel or per-token scaling is not supported on SM>=100.")


def main(version: str, argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    ckpt = json.loads((Path(args.checkpoint_dir) / "config.json").read_text())
    if ckpt["architecture"].startswith("Qwen") and "qwen_type" not in ckpt:
        sys.exit("AttributeError: 'QWenConfig' object has no attribute 'qwen_type'")
    tp = ckpt["mapping"]["tp_size"]
    for r in range(tp):
        if not (Path(args.checkpoint_dir) / f"rank{r}.safetensors").is_file():
            sys.exit(f"[TensorRT-LLM][ERROR] missing rank{r}.safetensors")
    plugin = _plugin_config(args, ckpt)
    q = ckpt.get("quantization") or {}
    major, _, minor = os.environ.get("FAKE_TRTLLM_SM", "9.0").partition(".")
    try:
        _builder_rules(plugin, q.get("quant_algo"), q.get("kv_cache_quant_algo"), int(major) * 10 + int(minor or 0))
    except RuntimeError as err:
        sys.exit(f"RuntimeError: {err}")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    build = {k: getattr(args, k) for k in INTS if getattr(args, k) is not None}
    build |= {"kv_cache_type": (args.kv_cache_type or "paged").upper(), "plugin_config": plugin}
    if build["plugin_config"]["lora_plugin"] is not None:  # otherwise the LoRA flags are ignored, as upstream
        build["lora_config"] = _lora_config(args)
    engine_config = {"version": version, "pretrained_config": ckpt, "build_config": build}
    (out / "config.json").write_text(json.dumps(engine_config, indent=2))
    for r in range(tp):
        (out / f"rank{r}.engine").write_bytes(b"fake TensorRT plan for rank %d" % r)
    print(f"[TensorRT-LLM] [I] Total time of building all engines: 00:00:00 ({tp} ranks)")
