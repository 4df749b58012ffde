"""The fakes' "model" (no part of TensorRT-LLM's API): a pure function tests can load on their own."""

from __future__ import annotations


def next_greedy(tokens: list[int], vocab: int, offset: int = 0) -> int:
    """offset: what a LoRA adapter adds (lora.adapter_offset); 0 for the base model."""
    prev = tokens[-2] if len(tokens) > 1 else 0
    return (31 * tokens[-1] + 7 * prev + 11 + offset) % vocab


def reference_greedy(prompt: list[int], steps: int, vocab: int, offset: int = 0) -> list[int]:
    """What greedy decoding of `prompt` yields for `steps` tokens, ignoring EOS."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(next_greedy(seq, vocab, offset))
    return seq[len(prompt) :]
