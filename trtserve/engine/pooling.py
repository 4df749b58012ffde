"""Pooling models: a decoder that runs prefill only and returns a vector (an embedder) or scores (a
sequence classifier, a generative reranker) instead of generating (docs/pooling.md).

`PoolingConfig` is what `trtserve build` records in the manifest (`manifest.pooling`) and what the
engine declares in `EngineInfo.pooling`; a request asks for its output with the one request-options
field `RequestOptions.pooling` (its task), and the final `TokenDelta.pooled` carries it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PoolingTask = Literal["embed", "classify", "rerank"]
PoolingMethod = Literal["last", "mean"]

# Head tensors of pooling.safetensors (engine/layout.py: POOLING_WEIGHTS)
SCORE = "score.weight"  # (num_labels, hidden): a sequence-classification head, HF's `score` Linear
RERANK_PAIR = "rerank.weight"  # (2, hidden): the LM head's rows of the "yes" and "no" tokens

# Qwen3-Reranker's prompt (its model card): a chat turn whose answer is "yes" or "no"
QWEN3_RERANK_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
QWEN3_RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_RERANK_PAIR = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
QWEN3_RERANK_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


class RerankPrompt(BaseModel):
    """How a generative reranker reads one (query, document) pair: prefix + pair + suffix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: str = QWEN3_RERANK_PREFIX
    pair: str = QWEN3_RERANK_PAIR  # with {instruction}, {query} and {document}
    suffix: str = QWEN3_RERANK_SUFFIX
    instruction: str = QWEN3_RERANK_INSTRUCTION

    def render(self, query: str, document: str) -> str:
        pair = self.pair.format(instruction=self.instruction, query=query, document=document)
        return self.prefix + pair + self.suffix


class PoolingConfig(BaseModel):
    """A pooling engine: what it computes from the final hidden states (normed, as HF's last_hidden_state)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: PoolingTask
    method: PoolingMethod = "last"  # embed: the last token's hidden state, or the mean over the prompt
    normalize: bool = True  # embed: the vector scaled to unit L2 norm
    dimensions: int = Field(0, ge=0)  # the vector's length (embed: hidden size; classify: labels; rerank: 1)
    # classify: one name per output (HF's id2label, in id order); rerank: ["relevant"]
    labels: list[str] = Field(default_factory=list)
    # rerank: the token ids whose logits' difference (yes - no) is the relevance logit
    yes_token_id: int | None = None
    no_token_id: int | None = None
    rerank_prompt: RerankPrompt | None = None  # rerank: how a (query, document) pair becomes a prompt

    @property
    def head(self) -> str | None:
        """The pooling.safetensors tensor applied after pooling (None: the pooled vector itself)."""
        return {"embed": None, "classify": SCORE, "rerank": RERANK_PAIR}[self.task]

    @property
    def scores(self) -> bool:
        """It scores text pairs (/v1/score, /v1/rerank): a reranker, or a classifier of one label
        (a cross-encoder)."""
        return self.task == "rerank" or (self.task == "classify" and self.dimensions == 1)

    def describe(self) -> str:
        """How messages name it: "an embedding model", "a classifier", "a reranker"."""
        return {"embed": "an embedding model", "classify": "a classifier", "rerank": "a reranker"}[self.task]


def sigmoid(x: float) -> float:
    """A logit as a probability, without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]
