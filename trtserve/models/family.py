"""What differs between decoder families, and the HF -> ModelConfig translation they share.

Each family file (llama.py, mistral.py, qwen2.py) declares a `DecoderFamily`; the registry maps HF
architecture names to them. The converter and the forward pass read only these fields, never a
family by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.errors import UserError
from trtserve.models.config import ModelConfig

# RoPE variants whose inverse frequencies are fixed at load time (see models/rope.py).
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class DecoderFamily:
    name: str  # "llama"
    hf_architectures: tuple[str, ...]  # HF `architectures` values this family reads
    trtllm_architecture: str  # TensorRT-LLM's architecture name for the checkpoint
    qkv_bias: bool  # q/k/v projections carry biases
    gguf_arch: str | None  # GGUF `general.architecture`, if GGUF files of it are read
    gguf_permuted_qk: bool  # llama.cpp's converter permuted q/k rows for its RoPE layout
    uses_sliding_window: bool = False

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
        if getattr(hf, "use_sliding_window", False) and not self.uses_sliding_window:
            raise UserError(
                f"{self.name} with use_sliding_window=true is not supported; set it to false in config.json"
            )
        window = getattr(hf, "sliding_window", None) if self.uses_sliding_window else None
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
            rotary_scaling=rope if rope_type != "default" else None,
            attn_bias=self.qkv_bias or bool(getattr(hf, "attention_bias", False)),
            mlp_bias=bool(getattr(hf, "mlp_bias", False)),
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
            sliding_window=window,
        )
