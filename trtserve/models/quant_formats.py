"""The quantization formats, one declarative spec each, keyed by TensorRT-LLM's `quant_algo`; and
the 8-bit KV-cache formats, keyed by `kv_cache_quant_algo`. The only place a format is described.

Readers: the torch engine (its quantized linears, models/quantized.py; its KV cache,
models/kv_cache.py), the build (`--quant` / `--kv-cache-quant` choices and checks, ModelOpt's
recipe, checkpoint conversion in quant/convert.py, the weight-only rounding in build/weight_only.py)
and the TensorRT-LLM plans (backends/tensorrt_llm/quant.py). Adding a format is one spec here (or `register_quant_format`)
plus its run-time linear. This module imports no torch: dtypes are named, and a spec's run-time
linear is a class or "module:Class", imported when an engine loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# Int4 group sizes (--group-size) that both TensorRT-LLM's groupwise kernels and torch's CPU int4
# GEMM run; the first is the default.
GROUP_SIZES = (128, 64)


@dataclass(frozen=True)
class ModeloptRecipe:
    """One `--quant` value: how NVIDIA ModelOpt 0.47 produces the format."""

    name: str  # the --quant value
    modelopt_cfg: str  # attribute of modelopt.torch.quantization (a `mtq.quantize` config)
    calibrated: bool  # True: activation scales (or AWQ search) come from running calibration text
    summary: str
    smoothquant: bool = False  # ModelOpt's smoothquant algorithm, with --smoothquant-alpha
    # "module:function": the recipe as a pure function of one float weight (w, group_size) -> its tensors
    # by TensorRT-LLM suffix, ModelOpt's math, which the build runs itself for models ModelOpt 0.47 cannot
    # export (families with experts, build/weight_only.py); None: ModelOpt only
    rounding: str | None = None


@dataclass(frozen=True)
class CheckpointRules:
    """How ModelOpt's HF export of the format becomes TensorRT-LLM checkpoint tensors (quant/convert.py).
    Projections that share an input (q/k/v, gate/up) are fused there; these say what differs per format."""

    # Fused projections with per-tensor weight scales share the largest one: the others' weights are
    # requantized into this dtype (FP8's e4m3). None: the format has no per-tensor weight scale.
    requant_dtype: str | None = None
    # HF export suffix -> TensorRT-LLM suffix, where the format's differs from the common table.
    renames: Mapping[str, str] = field(default_factory=dict)
    per_tensor_shape: tuple[int, ...] = (1,)  # a per-tensor scale's shape (NVIDIA writes NVFP4's 0-d)
    weight_view: str | None = None  # the dtype the fused weight is viewed as (packed int4 bytes: int8)
    inputs_per_element: int = 1  # input features per weight element along dim 1 (packed fp4: 2)
    # A last rule on each fused linear's tensors (by TensorRT-LLM suffix), for what data cannot say.
    finish: Callable[[dict], dict] | None = None


@dataclass(frozen=True)
class TrtllmFlags:
    """What `trtllm-build` does with a checkpoint of the format (fact sheet section 2)."""

    fused_mlp: bool = False  # trtllm-build forces use_fused_mlp off for all but FP8 (and unquantized)
    fp8_context_fmha: bool = False  # use_fp8_context_fmha applies
    gemm_plugin: str = "auto"  # "auto": the model dtype; FP8 / NVFP4 have their own


@dataclass(frozen=True)
class QuantFormatSpec:
    quant_algo: str  # the key: TensorRT-LLM QuantAlgo written to checkpoint/config.json
    recipes: tuple[ModeloptRecipe, ...]  # the --quant values producing it
    block: int  # every linear's in-features must be divisible by this (1: any); int4: the default group
    # The run-time linear: a class, or "module:Class", built as Class(tensors, dtype, group_size) where
    # tensors are one linear's by TensorRT-LLM suffix; maps (tokens, in) -> (tokens, out).
    linear: str | Callable
    checkpoint: CheckpointRules = CheckpointRules()
    trtllm: TrtllmFlags = TrtllmFlags()
    group_sizes: tuple[int, ...] = ()  # the --group-size values it takes (int4 groups); () = none
    modelopt_algo: str | None = None  # the quant_algo ModelOpt's export writes, where it differs
    # The source format whose own quantization the format keeps ("gguf": a GGUF file's blocks, re-encoded
    # per linear by build/gguf_linears.py), built without ModelOpt; None: ModelOpt quantizes.
    source: str | None = None

    @property
    def exported_as(self) -> str:
        return self.modelopt_algo or self.quant_algo

    def block_for(self, group_size: int) -> int:
        """The in-features block with --group-size applied (formats without int4 groups keep theirs)."""
        return group_size if self.group_sizes else self.block

    def kernel(self) -> Callable:
        return self.linear if not isinstance(self.linear, str) else resolve(self.linear)


def resolve(ref: str) -> Callable:
    """The object a "module:attr" reference names, imported now."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class KVCacheFormatSpec:
    kv_cache_quant_algo: str  # the key: TensorRT-LLM's name
    name: str  # the --kv-cache-quant value
    value_dtype: str  # torch dtype of the stored x / scale values (integer dtypes are rounded first)
    limit: float  # its largest magnitude
    storage_dtype: str  # the cache tensor's dtype (CPU index_copy_ / index_select do not take float8)
    modelopt_quantizer: Mapping  # ModelOpt 0.47's `*[kv]_bmm_quantizer` cfg
    trtllm_unit_scale: bool  # NVIDIA's TensorRT-LLM exporter writes 1.0 scales (e4m3 covers the range)
    llmapi_dtype: str | None  # KvCacheConfig.dtype on TensorRT-LLM's PyTorch backend; None: not there


_Q = "trtserve.models.quantized:"
_W = "trtserve.build.weight_only:"
_BUILTIN = (
    QuantFormatSpec(
        "W8A16",
        (
            ModeloptRecipe(
                "w8a16", "INT8_WEIGHT_ONLY_CFG", False, "int8 weights, per-channel scales", rounding=_W + "int8_rows"
            ),
        ),
        1,
        _Q + "Int8WeightOnly",
    ),
    # ModelOpt exports group-wise INT4 (with or without AWQ) as W4A16_AWQ; without AWQ the pre-quant
    # scale is absent. TensorRT-LLM's plain W4A16 is per-channel and not ModelOpt's.
    QuantFormatSpec(
        "W4A16_AWQ",
        (
            ModeloptRecipe(
                "w4a16",
                "INT4_BLOCKWISE_WEIGHT_ONLY_CFG",
                False,
                "int4 weights, groups of 128",
                rounding=_W + "int4_groups",
            ),
            ModeloptRecipe("w4a16_awq", "INT4_AWQ_CFG", True, "int4 weights, groups of 128, AWQ scales"),
        ),
        128,
        _Q + "Int4Groupwise",
        CheckpointRules(weight_view="int8"),  # TensorRT-LLM's dtype for packed int4
        group_sizes=GROUP_SIZES,
    ),
    QuantFormatSpec(
        "W8A8_SQ_PER_CHANNEL",
        (ModeloptRecipe("w8a8_sq", "INT8_SMOOTHQUANT_CFG", True, "SmoothQuant int8 x int8", smoothquant=True),),
        1,
        _Q + "Int8SmoothQuant",
    ),
    QuantFormatSpec(
        "FP8",
        (ModeloptRecipe("fp8", "FP8_DEFAULT_CFG", True, "fp8 e4m3 weights and activations, per tensor"),),
        1,
        _Q + "Fp8Linear",
        CheckpointRules(requant_dtype="float8_e4m3fn"),
        TrtllmFlags(fused_mlp=True, fp8_context_fmha=True, gemm_plugin="fp8"),
    ),
    QuantFormatSpec(
        "FP8_PER_CHANNEL_PER_TOKEN",
        (
            ModeloptRecipe(
                "fp8_pcpt", "FP8_PER_CHANNEL_PER_TOKEN_CFG", False, "fp8 weights per channel, activations per token"
            ),
        ),
        1,
        _Q + "Fp8Linear",
        CheckpointRules(renames={"weight_scale": "per_channel_scale"}),
    ),
    QuantFormatSpec(
        "W4A8_AWQ",
        (ModeloptRecipe("w4a8_awq", "W4A8_AWQ_BETA_CFG", True, "int4 weights (AWQ), fp8 activations"),),
        128,  # TensorRT-LLM's W4A8 kernels take groups of 128 only
        _Q + "Int4Fp8Awq",
        CheckpointRules(weight_view="int8"),
        TrtllmFlags(fp8_context_fmha=True),
    ),
    QuantFormatSpec(
        "NVFP4",
        (ModeloptRecipe("nvfp4", "NVFP4_DEFAULT_CFG", True, "fp4 e2m1 weights, fp8 block scales of 16"),),
        16,
        _Q + "Nvfp4Linear",
        CheckpointRules(per_tensor_shape=(), inputs_per_element=2),
        TrtllmFlags(fp8_context_fmha=True, gemm_plugin="nvfp4"),
    ),
    # A GGUF file's own quantization, each linear in the packed format nearest its GGUF type: W4A16
    # with zero points in groups of 32 (Q4_0, Q4_1, Q4_K, exact), W8A16 (Q8_0, Q5_*, Q6_K) or dense.
    QuantFormatSpec(
        "MIXED_PRECISION",
        (ModeloptRecipe("gguf", "", False, "keep a GGUF file's own quantization (int4 / int8 per tensor)"),),
        1,
        _Q + "mixed_linear",
        source="gguf",
    ),
)
QUANT_FORMATS: dict[str, QuantFormatSpec] = {s.quant_algo: s for s in _BUILTIN}

KV_CACHE_FORMATS: dict[str, KVCacheFormatSpec] = {
    s.kv_cache_quant_algo: s
    for s in (
        KVCacheFormatSpec("INT8", "int8", "int8", 127.0, "int8", {"num_bits": 8, "axis": None}, False, None),
        KVCacheFormatSpec(
            "FP8", "fp8", "float8_e4m3fn", 448.0, "uint8", {"num_bits": (4, 3), "axis": None}, True, "fp8"
        ),
    )
}


def quant_names() -> list[str]:
    """Every --quant value, in registry order."""
    return [r.name for s in QUANT_FORMATS.values() for r in s.recipes]


def modelopt_names() -> list[str]:
    """The --quant values ModelOpt produces (not those keeping a source's own quantization)."""
    return [r.name for s in QUANT_FORMATS.values() if s.source is None for r in s.recipes]


def grouped_names() -> list[str]:
    """The --quant values that take --group-size."""
    return [r.name for s in QUANT_FORMATS.values() if s.group_sizes for r in s.recipes]


def kv_cache_names() -> list[str]:
    return [s.name for s in KV_CACHE_FORMATS.values()]


def by_name(name: str) -> tuple[QuantFormatSpec, ModeloptRecipe]:
    """The format and recipe of a --quant value (KeyError if none)."""
    for spec in QUANT_FORMATS.values():
        for recipe in spec.recipes:
            if recipe.name == name:
                return spec, recipe
    raise KeyError(name)


def kv_by_name(name: str) -> KVCacheFormatSpec:
    for spec in KV_CACHE_FORMATS.values():
        if spec.name == name:
            return spec
    raise KeyError(name)


def quant_format(quant_algo: str) -> QuantFormatSpec:
    try:
        return QUANT_FORMATS[quant_algo]
    except KeyError:
        raise ValueError(f"the torch engine has no kernel for quant_algo {quant_algo}") from None


def register_quant_format(spec: QuantFormatSpec) -> None:
    """Add a format (e.g. from a plugin or a test); its quant_algo and --quant names must be new."""
    taken = set(quant_names()) & {r.name for r in spec.recipes}
    if spec.quant_algo in QUANT_FORMATS or taken:
        raise ValueError(f"quant format {spec.quant_algo} clashes with a registered one ({sorted(taken)})")
    if not spec.recipes:
        raise ValueError(f"quant format {spec.quant_algo} needs at least one --quant recipe")
    QUANT_FORMATS[spec.quant_algo] = spec


def unregister_quant_format(quant_algo: str) -> None:
    QUANT_FORMATS.pop(quant_algo, None)
