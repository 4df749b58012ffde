"""Tiny random checkpoints of the dense families of issue 46, one shape each, for the tests that run every
capability over every family (LoRA, quant formats): transformers' model_type and its config overrides."""

from __future__ import annotations

WINDOW = 8  # below the prompts' lengths: the windowed layers drop keys
GEMMA = dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW, tie_word_embeddings=False)

# family name -> (transformers model_type, overrides of family_goldens.COMMON)
DENSE = {
    "qwen3": ("qwen3", dict(head_dim=32, num_key_value_heads=1)),
    "gemma2": ("gemma2", GEMMA),
    "gemma3": ("gemma3_text", GEMMA | dict(layer_types=["sliding_attention", "full_attention"])),
    "phi3": ("phi3", dict(partial_rotary_factor=0.5)),
    "smollm3": ("smollm3", dict(no_rope_layer_interval=2)),
    "granite": (
        "granite",
        dict(embedding_multiplier=12.0, attention_multiplier=0.09, residual_multiplier=0.22, logits_scaling=4.0),
    ),
}
