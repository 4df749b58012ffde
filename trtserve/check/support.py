"""The `support` and `plan` checks.

`support` asks the tables a build reads, through the functions the build planner calls
(build/planner.py `resolve`), nothing copied: the family registry (architecture, layer features,
RoPE, activation), the backend's strategy (what it accepts: source format, quantization), the
tensor-parallel rule, the quant-format registry (block sizes, KV-cache formats, tp 1), the
backend table's target device against the target's, and what the backend's builder refuses on the
target's GPU (trtllm-build on Blackwell). `plan` then resolves the whole plan: limits,
and for TensorRT-LLM backends the BuildConfig and the `trtllm-build` / `trtllm-serve` lines.
"""

from __future__ import annotations

from pathlib import Path

from trtserve.build.builder import dry_run, plan_build
from trtserve.build.config import BuildConfig
from trtserve.build.convert import check_tp
from trtserve.build.gguf_default import resolve_quant
from trtserve.build.planner import BuildPlan, requested_quantization, resolve_dtype
from trtserve.build.source import open_checkpoint
from trtserve.build.strategies import STRATEGIES
from trtserve.check.result import CheckFailed, Outcome
from trtserve.check.targets import Target
from trtserve.engine.backends import BACKENDS
from trtserve.quant.checks import check_quant, formats_that_fit

PLAN_DIR = Path("ENGINE_DIR")  # where the dry-run lines say the engine dir goes


def check_support(cfg: BuildConfig, target: Target | None) -> Outcome:
    if not cfg.model:
        raise CheckFailed("the config names no model; add `model:` (a Hugging Face dir, a .gguf file or an alias)")
    reader = open_checkpoint(cfg.model)  # the family registry: UserError for an unknown architecture
    STRATEGIES[cfg.backend].accept(cfg, reader)
    cfg, _ = resolve_quant(cfg, reader)  # unset: a quantized GGUF's own, where it can be kept; none: None
    reader.family.check_build(cfg.backend, cfg.quant)  # the backends and quant formats the family is built with
    dtype = resolve_dtype(cfg, reader)
    model = reader.family.model_config(reader.hf_config, dtype)  # the family's features, RoPE, activation
    check_tp(model, cfg.tp_size)
    check_quant(model, cfg)
    backend = BACKENDS[cfg.backend]
    if target is not None and target.device == "cpu" and backend.target_device == "cuda":
        raise CheckFailed(
            f"backend {backend.name} runs on CUDA GPUs, but target {target.name} is a CPU; "
            "use backend torch or a GPU target"
        )
    if target is not None and target.sm is not None:  # what trtllm-build refuses on that GPU (Blackwell)
        STRATEGIES[cfg.backend].check_gpu(requested_quantization(cfg) if cfg.quant else None, target.sm)
    features = ", ".join(sorted(reader.family.features_of(model)))
    quant = cfg.quant or "unquantized"
    kv = f"{cfg.kv_cache_quant} KV cache" if cfg.kv_cache_quant else f"{dtype} KV cache"
    fits = ", ".join(formats_that_fit(model))
    return Outcome(
        f"{model.architecture} ({reader.family.name}: {features}) x {dtype} x {quant} x {kv} x "
        f"{backend.name} x tp {cfg.tp_size}",
        f"quant formats that fit this model: {fits}",
    )


def check_plan(cfg: BuildConfig) -> tuple[Outcome, BuildPlan]:
    plan = plan_build(cfg)
    lim = plan.limits
    limits = (
        f"max_batch_size {lim.max_batch_size}, max_seq_len {lim.max_seq_len}, "
        f"max_num_tokens {lim.max_num_tokens}, tokens_per_block {lim.plugin_config.tokens_per_block}"
    )
    if not STRATEGIES[cfg.backend].has_dry_run:
        return Outcome(f"{plan.backend} engine: {limits}"), plan
    text = dry_run(cfg, PLAN_DIR)
    return Outcome(f"{plan.backend} engine: {limits}; TensorRT-LLM BuildConfig and commands resolved", text), plan
