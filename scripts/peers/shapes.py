"""Random checkpoints shaped like each family's smallest real model, for speed figures (`compare.py
--model shape:qwen3`): the real model's widths, depths and vocabulary, random weights, the tests' small
byte-level tokenizer (benchmarks send token ids, so the tokenizer never matters)."""

from __future__ import annotations

import sys
from pathlib import Path

# family -> (transformers model_type, the real model it is shaped like, config fields)
SHAPES: dict[str, tuple[str, str, dict]] = {
    "llama": ("llama", "Llama-3.2-1B", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True)),
    "qwen2": ("qwen2", "Qwen2.5-0.5B", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
              num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)),
    "qwen3": ("qwen3", "Qwen3-0.6B", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
              num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
              tie_word_embeddings=True)),
    "smollm3": ("smollm3", "SmolLM3-3B", dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                num_attention_heads=16, num_key_value_heads=4, vocab_size=128256, tie_word_embeddings=True)),
    "granite": ("granite", "granite-3.3-2b", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=40,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=49159, tie_word_embeddings=True,
                embedding_multiplier=12.0, attention_multiplier=0.015625, residual_multiplier=0.22,
                logits_scaling=8.0)),
    "phi3": ("phi3", "Phi-4-mini", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
             num_attention_heads=24, num_key_value_heads=8, vocab_size=200064, tie_word_embeddings=True,
             partial_rotary_factor=0.75)),
    "gemma3": ("gemma3_text", "gemma-3-270m", dict(hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
               num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
               sliding_window=512, query_pre_attn_scalar=256)),
    "gemma2": ("gemma2", "gemma-2-2b", dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
               num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000)),
    # Qwen3-30B-A3B's widths and experts (128, top 8, renormalized as its config and llama.cpp's graph do),
    # 4 of its 48 layers: 2.4B parameters, ~0.3B active per token
    "qwen3_moe": ("qwen3_moe", "Qwen3-30B-A3B (4 of 48 layers)", dict(hidden_size=2048, intermediate_size=6144,
                  moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                  num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                  vocab_size=151936)),
    # OLMoE-1B-7B's widths and experts (64, top 8, not renormalized), 4 of its 16 layers: 2.0B parameters,
    # ~0.37B active per token
    "olmoe": ("olmoe", "OLMoE-1B-7B (4 of 16 layers)", dict(hidden_size=2048, intermediate_size=1024,
              num_experts=64, num_experts_per_tok=8, norm_topk_prob=False, num_hidden_layers=4,
              num_attention_heads=16, num_key_value_heads=16, vocab_size=50304)),
}  # fmt: skip
# SmolLM2-135M's widths (the demo model's), for the benchmarks that build it with a few of its 30 layers
SMOLLM2_135M = dict(
    hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0,
    bos_token_id=1, eos_token_id=2, pad_token_id=2,
)  # fmt: skip


def make_shaped(dest: Path, family: str, dtype: str = "bfloat16") -> Path:
    """Write a random HF checkpoint of `family`'s shape to dest (once; an existing one is reused)."""
    if (dest / "config.json").exists():
        return dest
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from helpers import write_tokenizer

    model_type, _, fields = SHAPES[family]
    cfg = AutoConfig.for_model(model_type, **fields, max_position_embeddings=4096, initializer_range=0.02)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    tmp = dest.with_name(dest.name + ".partial")
    model.save_pretrained(tmp)
    write_tokenizer(tmp)
    tmp.rename(dest)  # whole or absent: a crash mid-write leaves no half checkpoint to reuse
    return dest
