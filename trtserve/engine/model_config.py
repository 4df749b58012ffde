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


class Moe(BaseModel):
    """A mixture-of-experts MLP: TensorRT-LLM's `moe` config (models/moe.py runs it)."""

    model_config = ConfigDict(extra="forbid")
    num_experts: int
    top_k: int  # experts each token is routed to
    normalization_mode: int = 1  # TensorRT-LLM's ExpertScaleNormalizationMode: 0 softmax top-k as is, 1 renormalized


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
    sliding_window: int | None = None  # local attention (keys within the window): every layer's, or layer_windows'
    # each layer's window (None: it attends to every key), where layers differ (Gemma's local and global
    # layers); None: every layer has sliding_window
    layer_windows: list[int | None] | None = None
    rotary_base_local: float | None = None  # RoPE base of the windowed layers, unscaled (Gemma 3); None: rotary_base
    norm_weight_offset: float = 0.0  # every RMSNorm scales by (offset + weight), in float32 (Gemma: 1)
    attn_logit_softcapping: float | None = None  # attention scores become cap * tanh(scores / cap) (Gemma 2)
    final_logit_softcapping: float | None = None  # logits become cap * tanh(logits / cap) (Gemma 2)
    rotary_dim: int | None = None  # RoPE rotates each head's first rotary_dim dims, the rest pass (Phi-3); None: all
    rope_skip_layers: list[int] | None = None  # layers whose q and k are not rotated (SmolLM3's NoPE layers)
    embedding_multiplier: float = 1.0  # token embeddings scaled by it (Granite)
    attention_multiplier: float | None = None  # attention's softmax scale; None: head_size ** -0.5
    residual_multiplier: float = 1.0  # each block's output scaled by it before the residual add (Granite)
    logits_scaling: float = 1.0  # logits divided by it (Granite)
    moe: Moe | None = None  # the layers' MLP is a mixture of experts (features.MOE)
    moe_intermediate_size: int | None = None  # each expert's MLP width
    moe_layers: list[int] | None = None  # the layers whose MLP is the experts; None: every layer (with moe)
    moe_shared_expert_intermediate_size: int = 0  # a sigmoid-gated expert every token runs too (Qwen2-MoE); 0: none
    # gpt-oss's experts (features.CLAMPED_SWIGLU_EXPERTS): (up.clamp(-limit, limit) + 1) * g * sigmoid(alpha * g),
    # g = gate.clamp(max=limit); None: SiLU-gated experts
    swiglu_limit: float | None = None
    swiglu_alpha: float | None = None
    mapping: Mapping = Mapping()
    quantization: Quantization = Quantization()

    @property
    def long_rope(self) -> bool:
        """Whether RoPE is LongRoPE: two factor sets, the long one for sequences past the original length."""
        return (self.rotary_scaling or {}).get("rope_type", (self.rotary_scaling or {}).get("type")) == "longrope"

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_size

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_size

    @property
    def num_experts(self) -> int:
        return self.moe.num_experts if self.moe else 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether the layer's MLP is the mixture of experts (else the dense MLP)."""
        return self.moe is not None and (self.moe_layers is None or layer in self.moe_layers)

    def window(self, layer: int) -> int | None:
        """The keys one layer attends to: those within this many positions of the query; None: every key."""
        return self.layer_windows[layer] if self.layer_windows is not None else self.sliding_window

    @property
    def attention_windows(self) -> tuple[int | None, ...]:
        """The distinct windows of the layers (None: full attention), in layer order: one attention mask each."""
        return tuple(dict.fromkeys(self.window(i) for i in range(self.num_hidden_layers)))

    def kv_layer_kinds(self) -> dict[int | None, int]:
        """How many layers attend within each window (None: to every key)."""
        kinds: dict[int | None, int] = {}
        for i in range(self.num_hidden_layers):
            kinds[self.window(i)] = kinds.get(self.window(i), 0) + 1
        return kinds

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> int:
        """Bytes of K and V cache one token takes across all layers; kv_dtype: the cache's float dtype (None or
        "auto": the engine's)."""
        kv_dtype = None if kv_dtype == "auto" else kv_dtype
        per = 1 if kv_dtype is None and self.quantization.kv_cache_quant_algo else DTYPE_BYTES[kv_dtype or self.dtype]
        return 2 * self.num_hidden_layers * self.kv_size * per

    def to_trtllm(self) -> dict:
        return self.model_dump(mode="json")
