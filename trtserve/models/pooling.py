"""Pooling models on a decoder family: which HF architectures are pooling checkpoints of which family,
and the head applied to a sequence's pooled final hidden state (engine/pooling.py, docs/pooling.md).

A pooling checkpoint is its family's decoder without the LM head: `Qwen3Model` (an embedder saved by
AutoModel), `Qwen3ForSequenceClassification` (the decoder under `model.` plus a `score` Linear). Its
decoder converts as the family's causal LM does; the head, if any, goes to pooling.safetensors.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.pooling import RERANK_PAIR, PoolingConfig, PoolingTask
from trtserve.models.family import DecoderFamily
from trtserve.models.registry import family_for_hf

# An HF architecture's suffix -> the pooling task its checkpoint is built for
POOLING_SUFFIXES: dict[str, PoolingTask] = {"ForSequenceClassification": "classify", "Model": "embed"}
CAUSAL_SUFFIX = "ForCausalLM"


def pooling_architecture(arch: str) -> tuple[str, PoolingTask] | None:
    """("Qwen3ForCausalLM", "classify") for "Qwen3ForSequenceClassification"; None for any other name."""
    for suffix, task in POOLING_SUFFIXES.items():
        if arch.endswith(suffix) and not arch.endswith(CAUSAL_SUFFIX):
            return arch.removesuffix(suffix) + CAUSAL_SUFFIX, task
    return None


def causal_architectures(architectures: list[str] | None) -> list[str] | None:
    """The architectures with each pooling one named as its family's causal LM (what the registry knows)."""
    if architectures is None:
        return None
    return [p[0] if (p := pooling_architecture(a)) is not None else a for a in architectures]


def family_for_checkpoint(architectures: list[str] | None, model_type: str | None) -> DecoderFamily:
    """The family of an HF checkpoint, a pooling one read as its causal LM's; the registry's UserError
    (naming the checkpoint's own architectures) when neither is known."""
    try:
        return family_for_hf(architectures, model_type)
    except UserError as err:
        causal = causal_architectures(architectures)
        if causal == architectures:
            raise
        try:
            return family_for_hf(causal, model_type)
        except UserError:
            raise err from None


def pooling_task(architectures: list[str] | None) -> PoolingTask | None:
    """The task a checkpoint's architectures name (None: a causal LM, or no pooling architecture)."""
    for a in architectures or []:
        if (p := pooling_architecture(a)) is not None:
            return p[1]
    return None


class PoolingHead:
    """What a pooling engine computes from one sequence's pooled final hidden state (normed, as HF's
    last_hidden_state): the vector itself (embed), a classifier's logits, or a reranker's yes - no logit."""

    def __init__(self, config: PoolingConfig, weight: torch.Tensor | None):
        self.config = config
        self.weight = weight  # (outputs, hidden) in the model dtype; None: the vector itself

    @classmethod
    def load(cls, config: PoolingConfig, path: Path, device: torch.device) -> PoolingHead:
        """The head `config` names from pooling.safetensors (which an embedder without a head lacks)."""
        if config.head is None:
            return cls(config, None)
        from safetensors.torch import load_file

        tensors = load_file(str(path)) if path.is_file() else {}
        weight = tensors.get(config.head)
        if weight is None or weight.dim() != 2:
            raise EngineIntegrityError(
                f"{path.name} lacks the {config.task} head {config.head}; rebuild the engine with `trtserve build ... --force`"
            )
        return cls(config, weight.to(device))

    def apply(self, pooled: torch.Tensor) -> list[float]:
        """pooled: (hidden,) the sequence's last-token hidden state, or its mean (float32 or the model dtype)."""
        if self.weight is None:
            v = pooled.float()
            return (F.normalize(v, dim=0) if self.config.normalize else v).tolist()
        logits = F.linear(pooled.to(self.weight.dtype), self.weight).float()  # (outputs,), as HF's Linear
        if self.config.head == RERANK_PAIR:
            return [float(logits[0] - logits[1])]  # log P(yes) - log P(no) over the two tokens
        return logits.tolist()
