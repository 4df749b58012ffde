"""The unified checkpoint's `quantization` section (fact sheet section 1), checked for TensorRT-LLM,
and what trtllm-build does with it: from our format registry (models/quant_formats.py) for the
formats trtserve produces, from TensorRT-LLM's own rules for the others it may be given."""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.models.quant_formats import KV_CACHE_FORMATS, QUANT_FORMATS, TrtllmFlags

# QuantAlgo members (a StrEnum built with auto(), so each value is its name), TensorRT-LLM ~0.17-1.x.
QUANT_ALGOS = frozenset(
    [
        "W8A16",
        "W4A16",
        "W4A16_AWQ",
        "W4A8_AWQ",
        "W8A16_GPTQ",
        "W4A16_GPTQ",
        "W8A8_SQ_PER_CHANNEL",
        "W8A8_SQ_PER_TENSOR_PLUGIN",
        "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",
        "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN",
        "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN",
        "W4A8_QSERVE_PER_GROUP",
        "W4A8_QSERVE_PER_CHANNEL",
        "FP8",
        "FP8_PER_CHANNEL_PER_TOKEN",
        "FP8_BLOCK_SCALES",
        "MIXED_PRECISION",
        "NVFP4",
        "W4A8_NVFP4_FP8",
        "W4A8_MXFP4_FP8",
        "W4A8_MXFP4_MXFP8",
        "W4A16_MXFP4",
    ]
)
KV_CACHE_QUANT_ALGOS = frozenset({"FP8", "INT8", "NVFP4"})
# trtllm-build's flags for QuantAlgos trtserve does not produce (a checkpoint brought as MODEL);
# the rest default to TrtllmFlags() (trtllm-build forces use_fused_mlp off for them).
_OTHER_FLAGS = {None: TrtllmFlags(fused_mlp=True), "MIXED_PRECISION": TrtllmFlags(fused_mlp=True)}
# KvCacheConfig.dtype of KV formats trtserve does not produce. NVFP4 is "auto": KvCacheConfig acts only
# on "fp8" (1.0, 1.2: other values log "Cannot sync ..." and do nothing); an NVFP4 KV cache comes from
# the checkpoint's own quantization config.
_OTHER_KV_DTYPES = {"NVFP4": "auto"}


def plan_flags(quant_algo: str | None) -> TrtllmFlags:
    """What trtllm-build does for a checkpoint of `quant_algo` (None: unquantized)."""
    spec = QUANT_FORMATS.get(quant_algo) if quant_algo else None
    return spec.trtllm if spec else _OTHER_FLAGS.get(quant_algo, TrtllmFlags())


def llmapi_kv_dtype(kv_cache_quant_algo: str) -> str | None:
    """KvCacheConfig.dtype for a quantized KV cache on the PyTorch backend: "auto" = leave it to the
    checkpoint's quantization config; None: not available there."""
    spec = KV_CACHE_FORMATS.get(kv_cache_quant_algo)
    return spec.llmapi_dtype if spec else _OTHER_KV_DTYPES.get(kv_cache_quant_algo)


def quant_algos(quantization: dict | None) -> tuple[str | None, str | None]:
    """(quant_algo, kv_cache_quant_algo) of a checkpoint's `quantization`, validated; None = not quantized."""
    q = quantization or {}
    algo = q.get("quant_algo")
    kv = q.get("kv_cache_quant_algo")
    if algo in ("NO_QUANT", ""):
        algo = None
    if algo is not None and algo not in QUANT_ALGOS:
        hint = " (INT8 is only a kv_cache_quant_algo)" if algo == "INT8" else ""
        raise UserError(
            f"the checkpoint's quantization.quant_algo {algo!r} is not a TensorRT-LLM QuantAlgo{hint}; "
            f"use one of {', '.join(sorted(QUANT_ALGOS))} or rebuild without quantization"
        )
    if kv is not None and kv not in KV_CACHE_QUANT_ALGOS:
        raise UserError(
            f"the checkpoint's quantization.kv_cache_quant_algo {kv!r} is not supported by TensorRT-LLM; "
            f"use one of {', '.join(sorted(KV_CACHE_QUANT_ALGOS))} or none"
        )
    return algo, kv
