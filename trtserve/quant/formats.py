"""The quantization formats `trtserve build --quant` offers, and what each needs.

Each name maps to a ModelOpt 0.47 config (`modelopt.torch.quantization.*_CFG`) and to the
TensorRT-LLM QuantAlgo that ModelOpt's exporters write for it (fact sheet section 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

QuantName = Literal["w8a16", "w4a16", "w4a16_awq", "w8a8_sq", "fp8", "fp8_pcpt", "w4a8_awq", "nvfp4"]
KVQuantName = Literal["int8", "fp8"]
# Int4 group sizes (--group-size) that both TensorRT-LLM's groupwise kernels and torch's CPU int4
# GEMM run; W4A8_AWQ's kernels take 128 only.
GroupSize = Literal[64, 128]
GROUPED = ("w4a16", "w4a16_awq")


@dataclass(frozen=True)
class QuantFormat:
    name: str  # the --quant value
    modelopt_cfg: str  # attribute of modelopt.torch.quantization
    quant_algo: str  # TensorRT-LLM QuantAlgo written to checkpoint/config.json
    calibrated: bool  # True: activation scales (or AWQ search) come from running calibration text
    block: int  # in-features must be divisible by this (1 = no constraint); int4: the group size
    summary: str

    def with_group_size(self, group_size: int) -> QuantFormat:
        """This format with --group-size applied (formats without int4 groups keep their block)."""
        return replace(self, block=group_size) if self.name in GROUPED else self


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("w8a16", "INT8_WEIGHT_ONLY_CFG", "W8A16", False, 1, "int8 weights, per-channel scales"),
        # ModelOpt exports group-wise INT4 (with or without AWQ) as W4A16_AWQ; without AWQ the
        # pre-quant scale is absent. TensorRT-LLM's plain W4A16 is per-channel and not ModelOpt's.
        QuantFormat("w4a16", "INT4_BLOCKWISE_WEIGHT_ONLY_CFG", "W4A16_AWQ", False, 128, "int4 weights, groups of 128"),
        QuantFormat("w4a16_awq", "INT4_AWQ_CFG", "W4A16_AWQ", True, 128, "int4 weights, groups of 128, AWQ scales"),
        QuantFormat("w8a8_sq", "INT8_SMOOTHQUANT_CFG", "W8A8_SQ_PER_CHANNEL", True, 1, "SmoothQuant int8 x int8"),
        QuantFormat("fp8", "FP8_DEFAULT_CFG", "FP8", True, 1, "fp8 e4m3 weights and activations, per tensor"),
        QuantFormat(
            "fp8_pcpt",
            "FP8_PER_CHANNEL_PER_TOKEN_CFG",
            "FP8_PER_CHANNEL_PER_TOKEN",
            False,
            1,
            "fp8 weights per channel, activations per token",
        ),
        QuantFormat("w4a8_awq", "W4A8_AWQ_BETA_CFG", "W4A8_AWQ", True, 128, "int4 weights (AWQ), fp8 activations"),
        QuantFormat("nvfp4", "NVFP4_DEFAULT_CFG", "NVFP4", True, 16, "fp4 e2m1 weights, fp8 block scales of 16"),
    )
}

# KV-cache quantizers, appended to the weight config's quant_cfg list (ModelOpt 0.47 lists).
KV_FORMATS: dict[str, tuple[str, dict]] = {
    "int8": ("INT8", {"num_bits": 8, "axis": None}),
    "fp8": ("FP8", {"num_bits": (4, 3), "axis": None}),
}


def modelopt_config(
    quant: str, kv_cache_quant: str | None, group_size: int = 128, smoothquant_alpha: float | None = None
) -> dict:
    """The `mtq.quantize` config for a format, with the KV-cache quantizers when asked for.
    smoothquant_alpha None: 0.5, TensorRT-LLM's smoothquant_val (ModelOpt's own default is 1.0)."""
    import copy

    import modelopt.torch.quantization as mtq

    cfg = copy.deepcopy(getattr(mtq, FORMATS[quant].modelopt_cfg))
    if quant in GROUPED:
        for entry in cfg["quant_cfg"]:
            if entry["quantizer_name"] == "*weight_quantizer":
                entry["cfg"]["block_sizes"][-1] = group_size
    if quant == "w8a8_sq":
        alpha = 0.5 if smoothquant_alpha is None else smoothquant_alpha
        cfg["algorithm"] = {"method": "smoothquant", "alpha": alpha}
    if kv_cache_quant:
        kv = {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": dict(KV_FORMATS[kv_cache_quant][1])}
        cfg["quant_cfg"] = [*cfg["quant_cfg"], kv]
    return cfg


def help_text() -> str:
    """One line per format for --help: which ones run the calibration text."""
    cal = ", ".join(n for n, f in FORMATS.items() if f.calibrated)
    plain = ", ".join(n for n, f in FORMATS.items() if not f.calibrated)
    return f"calibrated with --calib-data text: {cal} (and any --kv-cache-quant); weights only: {plain}"
