"""One model family as data, and the HF -> ModelConfig translation families share.

Each family file (llama.py, mistral.py, qwen2.py, qwen3.py, ...) declares a `DecoderFamily`; the registry maps
architecture names to them. The converters, the GGUF reader and the decoder read only these
specs, never a family by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.models.features import (
    CONFIG_FIELDS,
    GELU_TANH_GATED_MLP,
    LOCAL_ROPE,
    LONG_ROPE,
    MLP_BIAS,
    PARTIAL_ROTARY,
    QKV_BIAS,
    ROPE_SCALING,
    SILU_GATED_MLP,
    SLIDING_WINDOW,
    TIED_EMBEDDINGS,
)
from trtserve.models.layout import Layout, Names

FULL, SLIDING = "full_attention", "sliding_attention"  # HF's layer_types
# The MLP activation of each gated-MLP feature (HF's hidden_act names)
ACTIVATIONS = {SILU_GATED_MLP: "silu", GELU_TANH_GATED_MLP: "gelu_pytorch_tanh"}
# RoPE variants whose inverse frequencies are fixed at load time (see models/rope.py).
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


@dataclass(frozen=True)
class GGUFNames:
    """How llama.cpp writes a family: GGUF tensors are read under the family's HF names."""

    arch: str  # GGUF `general.architecture`
    names: Names  # llama.cpp's module names by source role
    permuted_qk: bool  # llama.cpp's converter permuted q_proj/k_proj rows for its RoPE layout
    # HF config keys the family reads beyond the shared ones -> the metadata key (under `{arch}.`) llama.cpp
    # writes each to
    config_keys: dict[str, str] = field(default_factory=dict)
    model_type: str | None = None  # transformers' model_type where it is not `arch` (qwen3moe: qwen3_moe)
    # HF config values llama.cpp's graph of the architecture fixes (it writes no key for them)
    config_values: dict[str, Any] = field(default_factory=dict)
    # source roles whose weights llama.cpp's converter shifted by a constant (Gemma's norms: + 1), undone on read
    weight_offsets: dict[str, float] = field(default_factory=dict)
    # the RoPE base llama.cpp's graph fixes for the windowed layers (Gemma 3); None: the global one
    local_rope_base: float | None = None
    # rope_parameters entries every checkpoint of the family carries and llama.cpp's converter drops, added
    # where the file scales RoPE (gpt-oss's YaRN `truncate: false`)
    rope_values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stored:
    """Where a checkpoint keeps a source tensor inside another (gpt-oss's experts): `tensor` under the layer
    prefix, this one every `step`-th entry of its last dim from `start`, then its last two dims swapped where
    `transposed` (stored (..., in, out))."""

    tensor: str
    start: int = 0
    step: int = 1
    transposed: bool = False


@dataclass(frozen=True)
class DecoderFamily:
    name: str  # "llama"
    hf_architectures: tuple[str, ...]  # HF `architectures` values this family reads
    trtllm_architecture: str  # TensorRT-LLM's architecture name: all an engine records of its family
    layout: Layout  # roles and shapes, TensorRT-LLM's and the torch engine's modules and fusions
    hf: Names  # HF module names by source role
    gguf: GGUFNames | None  # None: GGUF files are not read as this family
    features: frozenset[str]  # layer features every model of the family has (features.py)
    config_features: frozenset[str]  # those its config.json may turn on (features.CONFIG_FIELDS)
    # ModelConfig fields the family reads from its transformers config beyond the shared ones
    config_extras: Callable[[Any], dict] | None = None
    backends: frozenset[str] | None = None  # engine/backends.py names that build it; None: every one
    quant_formats: frozenset[str] | None = None  # --quant names it is tested with; None: every one
    # source tensors (`{module}.weight` / `.bias` under the HF layer prefix) the HF checkpoint keeps inside
    # others, read by build/stored.py; the rest are stored as named
    hf_stored: dict[str, Stored] = field(default_factory=dict)

    def check_build(self, backend: str, quant: str | None) -> None:
        """Refuse (UserError) a backend or quant format this family is not built or tested with."""
        if self.backends is not None and backend not in self.backends:
            raise UserError(
                f"backend {backend} does not build {self.name} models yet; use --backend {' or '.join(sorted(self.backends))}"
            )
        if quant and self.quant_formats is not None and quant not in self.quant_formats:
            fits = ", ".join(sorted(self.quant_formats)) or "none"
            raise UserError(
                f"--quant {quant} is not supported for {self.name} models (supported: {fits}); leave --quant out"
            )

    def features_of(self, cfg: ModelConfig) -> frozenset[str]:
        """One built model's layer features: the family's, and those its config turned on."""
        return self.features | {f for f, field in CONFIG_FIELDS.items() if getattr(cfg, field)}

    def model_config(self, hf, dtype: str) -> ModelConfig:
        """Translate a transformers config object to TensorRT-LLM's pretrained_config."""
        heads = hf.num_attention_heads
        head_size = getattr(hf, "head_dim", None) or hf.hidden_size // heads
        rope, local_theta = _rope_parameters(hf)
        theta = float(rope.pop("rope_theta", getattr(hf, "rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise UserError(f"rope type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
        act = getattr(hf, "hidden_activation", None) or getattr(hf, "hidden_act", None) or "silu"
        if act not in (acts := [a for f, a in ACTIVATIONS.items() if f in self.features]):
            raise UserError(
                f"hidden_act {act!r} is not supported for {self.name}; only {' or '.join(map(repr, acts))} is"
            )
        partial = float(rope.pop("partial_rotary_factor", getattr(hf, "partial_rotary_factor", 1.0)) or 1.0)
        asked = _asked(hf, rope_type, partial)
        for feature, key in asked.items():
            if feature not in self.features | self.config_features:
                raise UserError(
                    f"{self.name} with {key}={getattr(hf, key, None)!r} is not supported ({feature}); turn it off in config.json"
                )
        on = self.features | asked.keys()
        if local_theta is not None and LOCAL_ROPE not in self.features | self.config_features:
            raise UserError(f"{self.name} with a RoPE base per layer type is not supported; give one rope_theta")
        extras = self.config_extras(hf) if self.config_extras else {}
        return ModelConfig(
            architecture=self.trtllm_architecture,
            dtype=dtype,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            num_hidden_layers=hf.num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=getattr(hf, "num_key_value_heads", None) or heads,
            head_size=head_size,
            intermediate_size=hf.intermediate_size,
            hidden_act=act,
            max_position_embeddings=getattr(hf, "max_position_embeddings", 2048) or 2048,
            norm_epsilon=float(hf.rms_norm_eps),
            rotary_base=theta,
            # LongRoPE's factors span the rotated dims: HF reads partial_rotary_factor beside them
            rotary_scaling=(rope | ({"partial_rotary_factor": partial} if partial != 1.0 else {}))
            if ROPE_SCALING in on
            else None,
            rotary_dim=int(head_size * partial) if PARTIAL_ROTARY in on else None,
            attn_bias=QKV_BIAS in on,
            mlp_bias=MLP_BIAS in on,
            tie_word_embeddings=TIED_EMBEDDINGS in on,
            sliding_window=getattr(hf, "sliding_window", None) if SLIDING_WINDOW in on else None,
            rotary_base_local=local_theta if local_theta != theta else None,
            **extras,
        )


def _rope_parameters(hf) -> tuple[dict, float | None]:
    """HF's rope_parameters of the global layers, and the windowed layers' RoPE base where HF keys them by
    layer type (Gemma 3: {"full_attention": {...}, "sliding_attention": {...}}; None where it does not)."""
    rope = dict(getattr(hf, "rope_parameters", None) or {})
    if FULL not in rope:
        return rope, None
    local = dict(rope.get(SLIDING) or {})
    if local.get("rope_type", local.get("type", "default")) != "default":
        raise UserError(
            f"rope type {local.get('rope_type')!r} on sliding-window layers is not supported; only 'default' is"
        )
    return dict(rope[FULL]), float(local.get("rope_theta", getattr(hf, "rope_local_base_freq", 10000.0)))


def layer_windows(hf) -> list[int | None]:
    """Each layer's attention window from HF's `layer_types` (or the older `sliding_window_pattern`: every
    pattern-th layer global); a UserError names a layer type trtserve does not run."""
    types = getattr(hf, "layer_types", None)
    if not types:
        pattern = int(getattr(hf, "sliding_window_pattern", 0) or 0)
        types = [SLIDING if pattern and (i + 1) % pattern else FULL for i in range(hf.num_hidden_layers)]
    unknown = sorted({t for t in types if t not in (FULL, SLIDING)})
    if unknown or len(types) != hf.num_hidden_layers:
        got = f"layer type {unknown[0]!r}" if unknown else f"{len(types)} layer types for {hf.num_hidden_layers} layers"
        raise UserError(f"{got} is not supported; layer_types must name {FULL!r} or {SLIDING!r} for each layer")
    return [hf.sliding_window if t == SLIDING else None for t in types]


def _asked(hf, rope_type: str, partial_rotary: float) -> dict[str, str]:
    """The optional layer features a transformers config turns on, each with the key that does."""
    window = "use_sliding_window" if hasattr(hf, "use_sliding_window") else "sliding_window"  # Qwen2 | Mistral
    keys = {
        QKV_BIAS: "attention_bias",
        MLP_BIAS: "mlp_bias",
        SLIDING_WINDOW: window,
        TIED_EMBEDDINGS: "tie_word_embeddings",
    }
    asked = {f: k for f, k in keys.items() if getattr(hf, k, None) not in (None, False)}
    if rope_type != "default":
        asked[ROPE_SCALING] = "rope_parameters"
    if rope_type == "longrope":
        asked[LONG_ROPE] = "rope_parameters"
    if partial_rotary != 1.0:
        asked[PARTIAL_ROTARY] = "partial_rotary_factor"
    return asked
