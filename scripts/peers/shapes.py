"""Random checkpoints shaped like each family's smallest real model, for speed figures (`compare.py
--model shape:qwen3`): the real model's widths, depths and vocabulary, random weights, the tests' small
byte-level tokenizer (benchmarks send token ids, so the tokenizer never matters).

`shape:FAMILY@N` keeps only N of the layers (widths, vocabulary and per-layer config unchanged): the real
model's first N layers, so a per-layer pattern (Gemma's local/global interleave, SmolLM3's NoPE layers)
is its first N entries; a whole period needs N >= 6 for gemma3, 4 for smollm3, 2 for gemma2."""

from __future__ import annotations

import sys
from pathlib import Path

# family -> (transformers model_type, the real model it is shaped like, its layer count, config fields);
# num_hidden_layers in the fields is the layers `shape:FAMILY` builds (fewer than the real model's for the MoE)
SHAPES: dict[str, tuple[str, str, int, dict]] = {
    "llama": ("llama", "Llama-3.2-1B", 16, dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True)),
    "qwen2": ("qwen2", "Qwen2.5-0.5B", 24, dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
              num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)),
    "qwen3": ("qwen3", "Qwen3-0.6B", 28, dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
              num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
              tie_word_embeddings=True)),
    "smollm3": ("smollm3", "SmolLM3-3B", 36, dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                num_attention_heads=16, num_key_value_heads=4, vocab_size=128256, tie_word_embeddings=True)),
    "granite": ("granite", "granite-3.3-2b", 40, dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=40,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=49159, tie_word_embeddings=True,
                embedding_multiplier=12.0, attention_multiplier=0.015625, residual_multiplier=0.22,
                logits_scaling=8.0)),
    "phi3": ("phi3", "Phi-4-mini", 32, dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
             num_attention_heads=24, num_key_value_heads=8, vocab_size=200064, tie_word_embeddings=True,
             partial_rotary_factor=0.75)),
    "gemma3": ("gemma3_text", "gemma-3-270m", 18, dict(hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
               num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
               sliding_window=512, query_pre_attn_scalar=256)),
    "gemma2": ("gemma2", "gemma-2-2b", 26, dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
               num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000)),
    # Qwen3-30B-A3B's widths and experts (128, top 8, renormalized as its config and llama.cpp's graph do),
    # 4 of its 48 layers: 2.4B parameters, ~0.3B active per token
    "qwen3_moe": ("qwen3_moe", "Qwen3-30B-A3B", 48, dict(hidden_size=2048, intermediate_size=6144,
                  moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                  num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                  vocab_size=151936)),
    # OLMoE-1B-7B's widths and experts (64, top 8, not renormalized), 4 of its 16 layers: 2.0B parameters,
    # ~0.37B active per token
    "olmoe": ("olmoe", "OLMoE-1B-7B", 16, dict(hidden_size=2048, intermediate_size=1024,
              num_experts=64, num_experts_per_tok=8, norm_topk_prob=False, num_hidden_layers=4,
              num_attention_heads=16, num_key_value_heads=16, vocab_size=50304)),
}  # fmt: skip
# SmolLM2-135M's widths (the demo model's), for the benchmarks that build it with a few of its 30 layers
SMOLLM2_135M = dict(
    hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0,
    bos_token_id=1, eos_token_id=2, pad_token_id=2,
)  # fmt: skip


def parse(text: str) -> tuple[str, int]:
    """`FAMILY` or `FAMILY@N` (of `shape:FAMILY[@N]`) -> (family, layers); no @N: the shape's own layers."""
    family, _, n = text.partition("@")
    if family not in SHAPES:
        raise SystemExit(f"error: no shape for {family!r}; shapes: {', '.join(SHAPES)}")
    default, real = SHAPES[family][3]["num_hidden_layers"], SHAPES[family][2]
    if not n:
        return family, default
    if not n.isdigit() or not 1 <= int(n) <= real:
        raise SystemExit(f"error: shape:{text}: N must be 1-{real} ({SHAPES[family][1]}'s layers)")
    return family, int(n)


def name(family: str, layers: int) -> str:
    """The cache, engine and GGUF name: shape-FAMILY for the shape's own layers, else shape-FAMILY-Nlayers."""
    own = SHAPES[family][3]["num_hidden_layers"]
    return f"shape-{family}" if layers == own else f"shape-{family}-{layers}layers"


# the config's per-layer lists, cut to the first N layers, and how `describe` says their values
PATTERNS = {
    "layer_types": {"sliding_attention": "sliding", "full_attention": "full attention"},
    "no_rope_layers": {1: "RoPE", 0: "NoPE"},
}


def config(family: str, layers: int):
    """The transformers config of `family`'s shape with `layers` layers: the real model's first `layers`, so
    its per-layer lists (PATTERNS: Gemma's layer_types, SmolLM3's no_rope_layers) are the real model's, cut."""
    from transformers import AutoConfig

    model_type, _, real, fields = SHAPES[family]
    common = dict(max_position_embeddings=4096, initializer_range=0.02)
    full = AutoConfig.for_model(model_type, **fields | {"num_hidden_layers": real}, **common).to_dict()
    cut = {k: full[k][:layers] for k in PATTERNS if isinstance(full.get(k), list)}
    return AutoConfig.for_model(model_type, **fields | cut | {"num_hidden_layers": layers}, **common)


def describe(family: str, layers: int) -> str:
    """The real model and how much of it, with the kept layers' mix where the real model's layers differ:
    'gemma-3-270m (6 of 18 layers: 5 sliding, 1 full attention)'."""
    _, real_name, real, _ = SHAPES[family]
    if layers == real:
        return real_name
    full, cut = config(family, real).to_dict(), config(family, layers).to_dict()
    mixes = [
        ", ".join(f"{cut[key].count(v)} {label}" for v, label in labels.items())
        for key, labels in PATTERNS.items()
        if isinstance(full.get(key), list) and len(set(full[key])) > 1
    ]
    return f"{real_name} ({layers} of {real} layers{': ' + '; '.join(mixes) if mixes else ''})"


def make_shaped(dest: Path, family: str, dtype: str = "bfloat16", layers: int | None = None) -> Path:
    """Write a random HF checkpoint of `family`'s shape (with `layers` layers: default, the shape's own) to
    dest (once; an existing one is reused)."""
    if (dest / "config.json").exists():
        return dest
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from helpers import write_tokenizer

    cfg = config(family, layers or SHAPES[family][3]["num_hidden_layers"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    tmp = dest.with_name(dest.name + ".partial")
    model.save_pretrained(tmp)
    write_tokenizer(tmp)
    _pad_vocab(tmp / "tokenizer.json", cfg.vocab_size)
    tmp.rename(dest)  # whole or absent: a crash mid-write leaves no half checkpoint to reuse
    return dest


def _pad_vocab(path: Path, vocab_size: int) -> None:
    """Pad the byte-level BPE tokenizer's vocabulary with unreachable tokens up to the model's vocab_size:
    llama.cpp's Gemma 3 converter cuts the embedding to the tokenizer's vocabulary, which would leave its
    GGUF a few hundred rows of the real model's 262,144 (and the benchmark's token ids out of range)."""
    import json

    tok = json.loads(path.read_text())
    vocab = tok["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in tok["added_tokens"]}
    vocab.update({f"<unused{i}>": i for i in range(vocab_size) if i not in taken})
    path.write_text(json.dumps(tok, ensure_ascii=False))
