"""A tiny random twin of a build's model, for the `smoke` check.

The twin keeps what decides which code paths a build and the engine take: the family (its config
class and `architectures`), every layer feature the config turns on (biases, tied embeddings,
sliding window, RoPE variant and scaling), the attention shape's kind (MHA, GQA or MQA, and a
head_dim override) and the dtype. It shrinks the rest: 2 layers, widths of 128 and 256 (every quant
format's block divides them: int4 groups of 64 or 128, NVFP4 blocks of 16), a byte-level tokenizer
of 259 tokens. Weights are random with a fixed seed, so a smoke run repeats exactly.
"""

from __future__ import annotations

from pathlib import Path

HIDDEN = 128  # a multiple of every quant block (GROUP_SIZES, NVFP4's 16)
INTERMEDIATE = 256
HEADS = 4
LAYERS = 2
VOCAB = 320  # >= the tokenizer's 259 ids; the rows past them are never sampled from prompts
SPECIALS = ("<s>", "</s>", "<unk>")  # ids 0, 1, 2: bos, eos, unk
FIRST_BYTE_ID = len(SPECIALS)  # prompts draw ids from [FIRST_BYTE_ID, FIRST_BYTE_ID + 256)
SLIDING_WINDOW = 16  # shorter than a smoke prompt plus its output, so the window really cuts
MAX_POSITIONS = 128
SEED = 0


def twin_config(source_hf, *, peaked: bool):
    """The twin's transformers config, from the source's. peaked: a larger init range, whose
    sharply peaked logits make greedy ties (which would make exact comparisons meaningless) rare;
    quantized twins use a tamer one, so 4- and 8-bit rounding does not grow chaotically."""
    src = source_hf
    heads = src.num_attention_heads
    kv = getattr(src, "num_key_value_heads", None) or heads
    natural = src.hidden_size // heads
    head_dim = getattr(src, "head_dim", None) or natural
    data = src.to_dict()
    # layer_types lists the source's layers; the config class derives the twin's from the rest
    for key in ("_name_or_path", "transformers_version", "dtype", "torch_dtype", "pad_token_id", "layer_types"):
        data.pop(key, None)
    data |= {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        # the kind of attention, not the ratio: MHA stays MHA, MQA stays MQA, any other GQA is 2:1
        "num_key_value_heads": HEADS if kv == heads else 1 if kv == 1 else HEADS // 2,
        "head_dim": 2 * HIDDEN // HEADS if head_dim != natural else HIDDEN // HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "initializer_range": 0.2 if peaked else 0.05,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    if data.get("sliding_window") is not None:
        data["sliding_window"] = SLIDING_WINDOW
    return type(src)(**data)


def write_twin(source_hf, dest: Path, dtype: str, *, peaked: bool) -> Path:
    """Save the twin (safetensors, config.json, tokenizer) to `dest` and return it."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = twin_config(source_hf, peaked=peaked)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    write_tokenizer(dest)
    return dest


def write_tokenizer(dest: Path) -> None:
    """A byte-level BPE with no merges: every byte is one token, nothing to train."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SPECIALS)} | {ch: FIRST_BYTE_ID + i for i, ch in enumerate(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(dest))


def prompts(n: int, length: int) -> list[list[int]]:
    """n seeded prompts of `length` byte tokens."""
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    return [torch.randint(FIRST_BYTE_ID, FIRST_BYTE_ID + 256, (length,), generator=g).tolist() for _ in range(n)]
