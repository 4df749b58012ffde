"""What `trtllm-build` does to the plugin flags it was given, and what it refuses, by quantization and SM.

TensorRT-LLM's `builder.py` (`build()`, 1.0-1.2) rewrites the plugin config after parsing the command
line, so the flags asked for are not always the engine's:

    context FMHA off                         -> FP8 context FMHA and paged context FMHA off
    quant_algo not FP8 / W4A8_AWQ / NVFP4     -> FP8 context FMHA off; with an FP8 KV cache, paged context FMHA off
    those three below SM 8.9                 -> the same
    those three with paged context FMHA      -> FP8 context FMHA follows the KV cache (on with FP8 KV, off without)
    an INT8 KV cache                         -> paged context FMHA off
and on Blackwell (100 <= SM < 120) it raises RuntimeError for INT8/INT4 weight-only formats and the INT8
KV cache, SmoothQuant, and per-channel / per-token scaling. Which QuantAlgo is which is quantization/mode.py's
`QuantMode.from_quant_algo`: W4A8_AWQ is `use_weight_only(use_int4_weights=True, per_group=True)`, an INT4
weight-only mode there (its FP8 activations are not a QuantMode flag), so it is refused like W4A16_AWQ. Paged context FMHA off means no KV block
reuse and no chunked context (`trtGptModelInflightBatching.cpp`), so the run-time options follow it.
Pure functions: nothing here imports tensorrt_llm.
"""

from __future__ import annotations

from dataclasses import dataclass

FP8_FMHA_ALGOS = frozenset({"FP8", "W4A8_AWQ", "NVFP4"})
# QuantMode of each QuantAlgo that builder.py's Blackwell check looks at (mode.py from_quant_algo):
# is_int8_weight_only / is_int4_weight_only
INT_WEIGHT_ONLY = frozenset({"W8A16", "W4A16", "W4A16_AWQ", "W4A8_AWQ", "W8A16_GPTQ", "W4A16_GPTQ"})
SMOOTHQUANT = frozenset(
    {
        "W8A8_SQ_PER_CHANNEL",
        "W8A8_SQ_PER_TENSOR_PLUGIN",
        "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",
        "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN",
        "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN",
    }
)
PER_CHANNEL_OR_TOKEN = frozenset({"FP8_PER_CHANNEL_PER_TOKEN"})
# what trtserve produces that trtllm-build takes on Blackwell (mode.py: neither is weight-only, SmoothQuant
# or per-channel / per-token)
BLACKWELL_FORMATS = ("FP8", "NVFP4")
FP8_FMHA_MIN_SM = (8, 9)
BLACKWELL = ((10, 0), (12, 0))  # [from, to): SM 10.x and 11.x (SM 12.x is not in builder.py's check)


@dataclass(frozen=True)
class FmhaFlags:
    context_fmha: bool = True
    use_paged_context_fmha: bool = True
    use_fp8_context_fmha: bool = False


def sm_tuple(sm: str | None) -> tuple[int, int] | None:
    if sm is None:
        return None
    major, _, minor = sm.partition(".")
    return int(major), int(minor or 0)


def built_flags(asked: FmhaFlags, quant_algo: str | None, kv_algo: str | None, sm: str | None) -> FmhaFlags:
    """The FMHA flags builder.py leaves in the engine for `asked`; sm None: assume SM 8.9 or newer."""
    ctx, paged, fp8 = asked.context_fmha, asked.use_paged_context_fmha, asked.use_fp8_context_fmha
    fp8_kv = kv_algo == "FP8"
    old_gpu = sm is not None and sm_tuple(sm) < FP8_FMHA_MIN_SM
    if not ctx:
        paged = fp8 = False
    elif quant_algo not in FP8_FMHA_ALGOS or old_gpu:
        fp8 = False
        paged = paged and not fp8_kv
    elif paged:
        fp8 = fp8_kv
    if kv_algo == "INT8":
        paged = False
    return FmhaFlags(ctx, paged, fp8)


def blackwell_problem(quant_algo: str | None, kv_algo: str | None, sm: str | None) -> str | None:
    """Why trtllm-build refuses this quantization on GPU `sm` (its RuntimeError); None if it does not."""
    v = sm_tuple(sm)
    if v is None or not BLACKWELL[0] <= v < BLACKWELL[1]:
        return None
    if quant_algo in INT_WEIGHT_ONLY or kv_algo == "INT8":
        what = "the INT8 KV cache" if kv_algo == "INT8" else f"{quant_algo} (INT8/INT4 weight-only)"
    elif quant_algo in SMOOTHQUANT:
        what = f"{quant_algo} (SmoothQuant)"
    elif quant_algo in PER_CHANNEL_OR_TOKEN:
        what = f"{quant_algo} (per-channel / per-token scaling)"
    else:
        return None
    return (
        f"trtllm-build refuses {what} on Blackwell GPUs (SM {sm}; builder.py: not supported on SM>=100); "
        f"use {' or '.join(BLACKWELL_FORMATS)} with an FP8 or unquantized KV cache there, or --backend trtllm "
        "with a ModelOpt-exported checkpoint"
    )
