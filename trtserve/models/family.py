"""One model family as data, and the HF -> ModelConfig translation families share.

Each family file (llama.py, mistral.py, qwen2.py) declares a `DecoderFamily`; the registry maps
architecture names to them. The converters, the GGUF reader and the decoder read only these
specs, never a family by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.models.features import (
    CONFIG_FIELDS,
    MLP_BIAS,
    QKV_BIAS,
    ROPE_SCALING,
    SLIDING_WINDOW,
    TIED_EMBEDDINGS,
)
from trtserve.models.layout import Layout, Names

# RoPE variants whose inverse frequencies are fixed at load time (see models/rope.py).
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class GGUFNames:
    """How llama.cpp writes a family: GGUF tensors are read under the family's HF names."""

    arch: str  # GGUF `general.architecture`
    names: Names  # llama.cpp's module names by source role
    permuted_qk: bool  # llama.cpp's converter permuted q_proj/k_proj rows for its RoPE layout


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

    def features_of(self, cfg: ModelConfig) -> frozenset[str]:
        """One built model's layer features: the family's, and those its config turned on."""
        return self.features | {f for f, field in CONFIG_FIELDS.items() if getattr(cfg, field)}

    def model_config(self, hf, dtype: str) -> ModelConfig:
        """Translate a transformers config object to TensorRT-LLM's pretrained_config."""
        heads = hf.num_attention_heads
        head_size = getattr(hf, "head_dim", None) or hf.hidden_size // heads
        rope = dict(getattr(hf, "rope_parameters", None) or {})
        theta = float(rope.pop("rope_theta", getattr(hf, "rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise UserError(f"rope type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
        if getattr(hf, "hidden_act", "silu") != "silu":
            raise UserError(f"hidden_act {hf.hidden_act!r} is not supported; only 'silu' is")
        asked = _asked(hf, rope_type)
        for feature, key in asked.items():
            if feature not in self.features | self.config_features:
                raise UserError(
                    f"{self.name} with {key}={getattr(hf, key)!r} is not supported ({feature}); turn it off in config.json"
                )
        on = self.features | asked.keys()
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
            max_position_embeddings=getattr(hf, "max_position_embeddings", 2048) or 2048,
            norm_epsilon=float(hf.rms_norm_eps),
            rotary_base=theta,
            rotary_scaling=rope if ROPE_SCALING in on else None,
            attn_bias=QKV_BIAS in on,
            mlp_bias=MLP_BIAS in on,
            tie_word_embeddings=TIED_EMBEDDINGS in on,
            sliding_window=getattr(hf, "sliding_window", None) if SLIDING_WINDOW in on else None,
        )


def _asked(hf, rope_type: str) -> dict[str, str]:
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
    return asked
