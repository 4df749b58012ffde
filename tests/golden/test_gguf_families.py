"""`--quant gguf` (the default for a quantized GGUF) on each dense family that builds from GGUF: a
file whose linears are Q4_0 (int4, re-encoded exactly) or Q8_0 (int8 per row) builds at its quantized
size, and its float32 engine agrees with the dequantized float32 engine of the same file (`--quant
none`; top-1 at every prompt position)."""

from __future__ import annotations

import pytest
import torch
from family_goldens import build, make_model, write_gguf
from gguf import GGMLQuantizationType as T
from gguf_kquants import logits, quantizing_writer, top1_agreement
from helpers import random_prompts
from safetensors.torch import load_file

# Gemma as llama.cpp reads it: attention scaled by key_length ** -0.5, norms stored plus one, its names
GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8, tie_word_embeddings=False)
GEMMA_GGUF = dict(
    permute=False,
    norm_offset=1.0,
    layer_names={
        "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm",
        "post_feedforward_layernorm": "post_ffw_norm",
    },
    extra=lambda w: w.add_uint32(f"{w.arch}.attention.sliding_window", 8),
)
# family -> (transformers model_type, config overrides, write_gguf's arguments)
FAMILIES = {
    "llama": ("llama", {}, dict(arch="llama", permute=True)),
    "qwen3": ("qwen3", dict(head_dim=32, num_key_value_heads=1), dict(arch="qwen3", permute=False)),
    "smollm3": ("smollm3", dict(num_hidden_layers=4, no_rope_layer_interval=2), dict(arch="smollm3", permute=True)),
    "granite": (
        "granite",
        dict(embedding_multiplier=12.0, attention_multiplier=0.09, residual_multiplier=0.22, logits_scaling=4.0),
        dict(
            arch="granite",
            permute=True,
            floats={"embedding_scale": 12.0, "attention.scale": 0.09, "residual_scale": 0.22, "logit_scale": 4.0},
        ),
    ),
    "phi3": ("phi3", {}, dict(arch="phi3", permute=False)),
    "gemma2": ("gemma2", GEMMA | dict(num_hidden_layers=2), dict(arch="gemma2", **GEMMA_GGUF)),
    "gemma3": ("gemma3_text", GEMMA | dict(num_hidden_layers=6), dict(arch="gemma3", **GEMMA_GGUF)),
}
# (GGUF type of the linears, the engine's packed form, least top-1 agreement)
TYPES = [(T.Q4_0, "int4", 0.98), (T.Q8_0, "int8", 0.95)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(("kind", "packed", "agree"), TYPES, ids=[t[0].name for t in TYPES])
def test_quant_gguf_agrees_with_the_dequantized_engine(tmp_path, monkeypatch, family, kind, packed, agree):
    model_type, overrides, gguf_args = FAMILIES[family]
    src = make_model(tmp_path / "hf", model_type, seed=2, **overrides)
    quantizing_writer(monkeypatch, kind)
    gguf_file = write_gguf(src, tmp_path / f"{family}.gguf", **gguf_args)
    ref = build(gguf_file, tmp_path / "dequantized", quant="none", dtype="float32")
    kept = build(gguf_file, tmp_path / "kept", dtype="float32")  # no --quant: gguf
    weights = load_file(kept / "model.safetensors")
    qkv = weights["transformer.layers.0.attention.qkv.weight"]
    assert qkv.dtype == torch.int8 and ("transformer.layers.0.attention.qkv.zero" in weights) == (packed == "int4")
    prompts = random_prompts(4, seed=3, lo=8, hi=40)
    assert top1_agreement(logits(ref, prompts), logits(kept, prompts)) >= agree
