"""Layer features: what a model's layers compute, named once.

A family spec (family.py) declares the features every model of it has and those its config.json
may turn on; `DecoderFamily.features_of` gives one built model's. A fast path declares the
features it implements (kernels/decode_layers.py `FEATURES`, as plain strings: kernels import
nothing of models/) and the decoder takes it only for models whose features are a subset.
"""

from __future__ import annotations

RMS_NORM = "rms_norm"  # x * rsqrt(mean(x^2) + eps) * weight
ROPE_NEOX = "rope_neox"  # rotary embedding over the two halves of each head
SILU_GATED_MLP = "silu_gated_mlp"  # down(silu(gate(x)) * up(x))
QKV_BIAS = "qkv_bias"  # q, k and v projections add a bias
MLP_BIAS = "mlp_bias"  # gate, up and down projections add a bias
SLIDING_WINDOW = "sliding_window"  # attention sees only the last `sliding_window` keys
TIED_EMBEDDINGS = "tied_embeddings"  # lm_head is the token embedding
ROPE_SCALING = "rope_scaling"  # RoPE frequencies rescaled (linear, llama3, yarn)
QK_NORM = "qk_norm"  # q and k each RMS-normed per head (head_dim weights) before RoPE (Qwen3)
QK_NORM_WIDE = "qk_norm_wide"  # q and k each RMS-normed over all their heads at once (q_size, kv_size weights; OLMoE)
NOPE_LAYERS = "nope_layers"  # some layers rotate neither q nor k (ModelConfig.rope_skip_layers; SmolLM3)
RESIDUAL_SCALE = "residual_scale"  # each block's output scaled before the residual add (Granite)
PARTIAL_ROTARY = "partial_rotary"  # RoPE rotates only each head's first ModelConfig.rotary_dim dims (Phi-3)
LONG_ROPE = "long_rope"  # LongRoPE: short or long factors by the sequence's length, as HF picks them (Phi-3)
MOE = "moe"  # some layers' MLP routes each token to its top-k of many experts (ModelConfig.moe; models/moe.py)
LAYER_WINDOWS = "layer_windows"  # layers attend within their own window or to every key (ModelConfig.layer_windows)
LOCAL_ROPE = "local_rope"  # the windowed layers rotate by their own RoPE base (ModelConfig.rotary_base_local; Gemma 3)
OFFSET_NORM = "offset_norm"  # RMSNorms scale by (1 + weight) in float32 (ModelConfig.norm_weight_offset; Gemma)
SANDWICH_NORMS = "sandwich_norms"  # attention's and the MLP's outputs are RMS-normed before the residual add (Gemma)
GELU_TANH_GATED_MLP = "gelu_tanh_gated_mlp"  # down(gelu_tanh(gate(x)) * up(x)) (Gemma's GeGLU)
SCALED_EMBEDDINGS = (
    "scaled_embeddings"  # embeddings times ModelConfig.embedding_multiplier rounded to the dtype (Gemma)
)
ATTN_SOFTCAP = "attn_softcap"  # attention scores soft-capped: cap * tanh(s / cap) (ModelConfig.attn_logit_softcapping)
FINAL_SOFTCAP = "final_softcap"  # logits soft-capped the same way (ModelConfig.final_logit_softcapping)
ATTN_SINKS = "attn_sinks"  # a learned logit per head joins each softmax's denominator (gpt-oss)
ATTN_OUT_BIAS = "attn_out_bias"  # o_proj adds a bias (gpt-oss)
# router and experts add biases, each token's top-k router logits softmaxed, and the experts' SwiGLU clamped
# (ModelConfig.swiglu_limit; gpt-oss)
CLAMPED_SWIGLU_EXPERTS = "clamped_swiglu_experts"

FEATURES = frozenset(
    {
        RMS_NORM, ROPE_NEOX, SILU_GATED_MLP, QKV_BIAS, MLP_BIAS, SLIDING_WINDOW, TIED_EMBEDDINGS, ROPE_SCALING,
        QK_NORM, QK_NORM_WIDE, NOPE_LAYERS, RESIDUAL_SCALE, PARTIAL_ROTARY, LONG_ROPE, MOE, LAYER_WINDOWS, LOCAL_ROPE,
        OFFSET_NORM, SANDWICH_NORMS, GELU_TANH_GATED_MLP, SCALED_EMBEDDINGS, ATTN_SOFTCAP, FINAL_SOFTCAP,
        ATTN_SINKS, ATTN_OUT_BIAS, CLAMPED_SWIGLU_EXPERTS,
    }
)  # fmt: skip
# A step feature, not a model's: some rows of the step run under LoRA adapters (models/lora.py). A fast
# path lists the step features it implements (decode_layers.STEP_FEATURES); steps with others run op by op.
LORA = "lora"

# The features a config can turn on, each with the ModelConfig field that records it (on when truthy).
CONFIG_FIELDS = {
    QKV_BIAS: "attn_bias",
    MLP_BIAS: "mlp_bias",
    SLIDING_WINDOW: "sliding_window",
    TIED_EMBEDDINGS: "tie_word_embeddings",
    ROPE_SCALING: "rotary_scaling",
    PARTIAL_ROTARY: "rotary_dim",
    LONG_ROPE: "long_rope",  # a ModelConfig property: rotary_scaling's type is longrope
    LAYER_WINDOWS: "layer_windows",
    LOCAL_ROPE: "rotary_base_local",
    ATTN_SOFTCAP: "attn_logit_softcapping",
    FINAL_SOFTCAP: "final_logit_softcapping",
}
