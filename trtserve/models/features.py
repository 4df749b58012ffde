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
NOPE_LAYERS = "nope_layers"  # some layers rotate neither q nor k (ModelConfig.rope_skip_layers; SmolLM3)
RESIDUAL_SCALE = "residual_scale"  # each block's output scaled before the residual add (Granite)
PARTIAL_ROTARY = "partial_rotary"  # RoPE rotates only each head's first ModelConfig.rotary_dim dims (Phi-3)
LONG_ROPE = "long_rope"  # LongRoPE: short or long factors by the sequence's length, as HF picks them (Phi-3)
MOE = "moe"  # some layers' MLP routes each token to its top-k of many experts (ModelConfig.moe; models/moe.py)

FEATURES = frozenset(
    {
        RMS_NORM, ROPE_NEOX, SILU_GATED_MLP, QKV_BIAS, MLP_BIAS, SLIDING_WINDOW, TIED_EMBEDDINGS, ROPE_SCALING,
        QK_NORM, NOPE_LAYERS, RESIDUAL_SCALE, PARTIAL_ROTARY, LONG_ROPE, MOE,
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
}
