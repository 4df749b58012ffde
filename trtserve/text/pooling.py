"""A pooling model's prompts and answers, shared by the server (serve/pooling/) and the offline
`trtserve.LLM` (docs/pooling.md): texts and (query, document) pairs as token ids, and the engine's raw
pooled outputs as what the endpoints return (probabilities, relevance scores, similarities)."""

from __future__ import annotations

import math

from trtserve.engine.pooling import PoolingConfig, sigmoid, softmax


def text_ids(tokenizer, text: str, truncate: int | None) -> list[int]:
    """One text as a prompt (the tokenizer's special tokens added), cut to its last `truncate` tokens."""
    ids = list(tokenizer.encode(text))
    return ids[-truncate:] if truncate is not None else ids


def pair_ids(tokenizer, config: PoolingConfig, query: str, document: str, truncate: int | None) -> list[int]:
    """A (query, document) pair as the model reads it: a reranker's prompt format (Qwen3-Reranker's:
    prefix, pair and suffix tokenized apart, the pair cut to fit), or a cross-encoder's two texts in a
    row; truncation cuts the pair's end."""
    fmt = config.rerank_prompt
    if fmt is None:
        ids = list(tokenizer.encode(query)) + list(tokenizer.encode(document, add_special_tokens=False))
        return ids[:truncate] if truncate is not None else ids
    prefix = tokenizer.encode(fmt.prefix, add_special_tokens=False)
    suffix = tokenizer.encode(fmt.suffix, add_special_tokens=False)
    text = fmt.pair.format(instruction=fmt.instruction, query=query, document=document)
    pair = tokenizer.encode(text, add_special_tokens=False)
    room = None if truncate is None else max(truncate - len(prefix) - len(suffix), 1)
    return list(prefix) + list(pair[:room]) + list(suffix)


def probabilities(config: PoolingConfig, logits: list[float]) -> list[float]:
    """A classifier's softmax over its labels; one logit (a cross-encoder's, a reranker's) as a sigmoid."""
    if len(logits) == 1:
        return [sigmoid(logits[0])]
    return softmax(logits)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / max(norm, 1e-12)
