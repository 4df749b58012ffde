"""The model description shared by the converter and the torch engine.

Field names follow TensorRT-LLM's unified checkpoint `config.json` (fact sheet section 1), so
`ModelConfig.to_trtllm()` is exactly what `checkpoint/config.json` holds.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class Mapping(BaseModel):
    model_config = ConfigDict(extra="forbid")
    world_size: int = 1
    tp_size: int = 1
    pp_size: int = 1


class Quantization(BaseModel):
    model_config = ConfigDict(extra="allow")
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None


class ModelConfig(BaseModel):
    """A decoder-only transformer in TensorRT-LLM's pretrained_config terms."""

    model_config = ConfigDict(extra="forbid")

    architecture: str  # e.g. "LlamaForCausalLM"
    dtype: str  # float32 | bfloat16 | float16: the dtype weights are stored and run in
    logits_dtype: str = "float32"
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_size: int
    intermediate_size: int
    hidden_act: str = "silu"
    max_position_embeddings: int
    position_embedding_type: str = "rope_gpt_neox"
    norm_epsilon: float
    rotary_base: float
    rotary_scaling: dict | None = None  # HF rope_scaling as-is ("type"/"rope_type", "factor", ...)
    attn_bias: bool = False  # q/k/v biases (Qwen2)
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    sliding_window: int | None = None  # Mistral-style local attention (keys within the window)
    mapping: Mapping = Mapping()
    quantization: Quantization = Quantization()

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_size

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_size

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> int:
        """Bytes of K and V cache one token takes across all layers."""
        per = 1 if kv_dtype is None and self.quantization.kv_cache_quant_algo else DTYPE_BYTES[kv_dtype or self.dtype]
        return 2 * self.num_hidden_layers * self.kv_size * per

    def to_trtllm(self) -> dict:
        return self.model_dump(mode="json")
