"""`--backend tensorrt`: our resolved build limits -> TensorRT-LLM's BuildConfig and `trtllm-build` argv.

Names and defaults follow `tensorrt_llm/commands/build.py`, `builder.py` and `plugin/plugin.py`
(fact sheet section 2; every flag emitted here was read again in 1.0-1.2, section 10). Which
TensorRT-LLM has `trtllm-build` at all is the capabilities' call (capabilities.py), not this file's.
Pure functions: nothing here imports tensorrt_llm.
"""

from __future__ import annotations

from trtserve.backends.tensorrt_llm.builder_rules import FmhaFlags, built_flags
from trtserve.backends.tensorrt_llm.quant import plan_flags, quant_algos
from trtserve.engine.layout import EngineBuildConfig


def fmha_flags(quantization: dict | None, sm: str | None = None) -> FmhaFlags:
    """The context-FMHA flags the engine will have: what trtserve asks for, as builder.py rewrites them."""
    algo, kv = quant_algos(quantization)
    return built_flags(FmhaFlags(use_fp8_context_fmha=plan_flags(algo).fp8_context_fmha), algo, kv, sm)


def plugin_config(
    limits: EngineBuildConfig, quantization: dict | None, lora_plugin: str | None = None, sm: str | None = None
) -> dict:
    """BuildConfig.plugin_config as `trtllm-build` writes it into the engine's config.json.
    lora_plugin: the LoRA plugin's dtype when adapters are built in (None: no LoRA);
    sm: the build GPU's compute capability (None: 8.9 or newer assumed)."""
    algo, _ = quant_algos(quantization)
    flags, fmha = plan_flags(algo), fmha_flags(quantization, sm)
    lora = {"lora_plugin": lora_plugin} if lora_plugin is not None else {}
    return lora | {
        "gpt_attention_plugin": "auto",  # the model dtype
        "gemm_plugin": flags.gemm_plugin,  # FP8 / NVFP4 have their own; otherwise the model dtype ("auto")
        "context_fmha": fmha.context_fmha,
        "paged_kv_cache": True,
        "remove_input_padding": True,
        "tokens_per_block": limits.plugin_config.tokens_per_block,
        "use_paged_context_fmha": fmha.use_paged_context_fmha,  # needed for KV-cache reuse and chunked context
        "use_fp8_context_fmha": fmha.use_fp8_context_fmha,
        "use_fused_mlp": flags.fused_mlp,
    }


def build_config(
    limits: EngineBuildConfig,
    quantization: dict | None,
    lora_plugin: str | None = None,
    lora: dict | None = None,
    sm: str | None = None,
) -> dict:
    """The dict `tensorrt_llm.BuildConfig.from_dict` takes (and `trtllm-build --build_config` reads);
    lora: BuildConfig.lora_config (lora.build_lora_config) with `lora_plugin` its dtype."""
    extra = {"lora_config": lora} if lora is not None else {}
    return extra | {
        "max_batch_size": limits.max_batch_size,
        "max_input_len": limits.max_input_len,
        "max_seq_len": limits.max_seq_len,
        "max_num_tokens": limits.max_num_tokens,
        "max_beam_width": limits.max_beam_width,
        "kv_cache_type": "PAGED",
        "plugin_config": plugin_config(limits, quantization, lora_plugin, sm),
    }


def _flag(on: bool) -> str:
    return "enable" if on else "disable"


def trtllm_build_argv(
    limits: EngineBuildConfig,
    quantization: dict | None,
    checkpoint_dir: str,
    output_dir: str,
    tp_size: int = 1,
    lora_flags: list[str] | None = None,
    sm: str | None = None,
) -> list[str]:
    """The `trtllm-build` command line that builds one rank{r}.engine per TP rank from our checkpoint.

    Quantization needs no flag: trtllm-build reads it from the checkpoint's config.json.
    lora_flags: lora.build_flags (the LoRA plugin and the adapters packed as task ids 0..n-1).
    """
    bc = build_config(limits, quantization, sm=sm)
    pc = bc["plugin_config"]  # the flags builder.py will leave, asked for as such
    argv = ["trtllm-build", "--checkpoint_dir", checkpoint_dir, "--output_dir", output_dir]
    for key in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width"):
        argv += [f"--{key}", str(bc[key])]
    argv += ["--kv_cache_type", "paged", "--tokens_per_block", str(pc["tokens_per_block"])]
    argv += ["--gpt_attention_plugin", pc["gpt_attention_plugin"], "--gemm_plugin", pc["gemm_plugin"]]
    # use_fp8_context_fmha is named either way: trtllm-build's default is `enable`, which is not what
    # the plan (and the engine's recorded plugin_config) says for a non-FP8 build.
    for key in (
        "context_fmha",
        "remove_input_padding",
        "use_paged_context_fmha",
        "use_fused_mlp",
        "use_fp8_context_fmha",
    ):
        argv += [f"--{key}", _flag(pc[key])]
    argv += ["--workers", str(tp_size)]  # one per rank; trtllm-build caps it at the GPU count
    return argv + list(lora_flags or [])


# Unified-checkpoint config.json keys TensorRT-LLM's model code needs beyond trtserve's ModelConfig,
# by checkpoint architecture. Qwen: tensorrt_llm/models/qwen/model.py reads `config.qwen_type`, which
# has no default, so trtllm-build fails with an AttributeError without it (fact sheet 10.6).
CHECKPOINT_EXTRAS: dict[str, dict] = {"Qwen2ForCausalLM": {"qwen_type": "qwen2"}}


def trtllm_checkpoint_config(config: dict) -> dict:
    """checkpoint/config.json as `trtllm-build` reads it: ours plus the architecture's extras."""
    return {**config, **CHECKPOINT_EXTRAS.get(config.get("architecture"), {})}
