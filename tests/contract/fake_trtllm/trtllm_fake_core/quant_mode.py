"""tensorrt_llm/quantization/mode.py: `QuantMode.from_quant_algo` and the predicates builder.py's Blackwell
check asks, as flag sets. Only the flags those predicates read are kept; the FP8 / FP4 formats' own flags
(FP8_QDQ, NVFP4, W4A8_QSERVE, ...) are one "other" flag here."""

from __future__ import annotations

WEIGHTS_AND_ACTIVATIONS = frozenset({"INT4_WEIGHTS", "INT8_WEIGHTS", "ACTIVATIONS"})


def _weight_only(int4: bool, per_group: bool = False) -> frozenset[str]:  # QuantMode.use_weight_only
    return frozenset({"INT4_WEIGHTS" if int4 else "INT8_WEIGHTS"} | ({"PER_GROUP"} if per_group else set()))


def _smooth_quant(per_token: bool, per_channel: bool) -> frozenset[str]:  # QuantMode.use_smooth_quant
    scaling = {name for name, on in (("PER_TOKEN", per_token), ("PER_CHANNEL", per_channel)) if on}
    return frozenset({"INT8_WEIGHTS", "ACTIVATIONS"} | scaling)


FROM_QUANT_ALGO: dict[str | None, frozenset[str]] = {
    None: frozenset(),
    "W8A16": _weight_only(False),
    "W4A16": _weight_only(True),
    "W4A16_AWQ": _weight_only(True, per_group=True),
    "W4A8_AWQ": _weight_only(True, per_group=True),  # int4 weight-only per group, as W4A16_AWQ
    "W4A16_GPTQ": _weight_only(True, per_group=True),
    "W8A16_GPTQ": _weight_only(False, per_group=True),
    "W8A8_SQ_PER_CHANNEL": _smooth_quant(per_token=False, per_channel=True),
    "W8A8_SQ_PER_TENSOR_PLUGIN": _smooth_quant(per_token=False, per_channel=False),
    "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN": _smooth_quant(per_token=True, per_channel=True),
    "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN": _smooth_quant(per_token=False, per_channel=True),
    "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN": _smooth_quant(per_token=True, per_channel=False),
    # use_qserve: weights and activations, INT4, W4A8_QSERVE (per group or not: no PER_CHANNEL flag)
    "W4A8_QSERVE_PER_GROUP": frozenset({"INT4_WEIGHTS", "ACTIVATIONS", "PER_GROUP", "OTHER"}),
    "W4A8_QSERVE_PER_CHANNEL": frozenset({"INT4_WEIGHTS", "ACTIVATIONS", "OTHER"}),
    "FP8_PER_CHANNEL_PER_TOKEN": frozenset({"OTHER", "PER_TOKEN", "PER_CHANNEL"}),  # use_fp8_rowwise
}  # every other QuantAlgo (FP8, FP8_BLOCK_SCALES, NVFP4, the MXFP4 and W4A8_NVFP4_FP8 ones): its own flag


def from_quant_algo(quant_algo: str | None, kv_cache_quant_algo: str | None) -> frozenset[str]:
    mode = FROM_QUANT_ALGO.get(quant_algo, frozenset({"OTHER"}))
    kv = {"INT8": {"INT8_KV_CACHE"}, "FP8": {"FP8_KV_CACHE"}, "NVFP4": {"NVFP4_KV_CACHE"}}.get(
        kv_cache_quant_algo, set()
    )
    return mode | kv


def _all(mode: frozenset[str], bits: set[str], mask: frozenset[str]) -> bool:
    return mode & mask == bits


def is_int8_weight_only(mode: frozenset[str]) -> bool:
    return _all(mode, {"INT8_WEIGHTS"}, WEIGHTS_AND_ACTIVATIONS)


def is_int4_weight_only(mode: frozenset[str]) -> bool:
    return _all(mode, {"INT4_WEIGHTS"}, WEIGHTS_AND_ACTIVATIONS)


def has_act_and_weight_quant(mode: frozenset[str]) -> bool:
    return _all(mode, {"INT8_WEIGHTS", "ACTIVATIONS"}, WEIGHTS_AND_ACTIVATIONS)
