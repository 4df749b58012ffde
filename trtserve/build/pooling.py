"""Building a pooling model (docs/pooling.md): the checkpoint's decoder converts as its family's causal
LM does, its head goes to pooling.safetensors, and the manifest records the task and head.

    Qwen3Model / LlamaModel (AutoModel saves)       embed: no LM head; tensors gain the `model.` prefix
    *ForSequenceClassification                      classify: `score.weight` (labels, hidden) set aside
    a causal LM with `--pooling rerank`             rerank: the LM head's rows of the two answer tokens
    a causal LM with `--pooling embed`              embed (Qwen3-Embedding's config names Qwen3ForCausalLM)

A model without its own LM head is converted with the embedding standing in for it (tied): the
decoder then has one, which a pooling engine never samples from (it refuses generation requests).
"""

from __future__ import annotations

from pathlib import Path

import torch

from trtserve.build.config import BuildConfig
from trtserve.build.reader import CheckpointReader, RenamedReader
from trtserve.engine.errors import UserError
from trtserve.engine.layout import POOLING_WEIGHTS
from trtserve.engine.model_config import ModelConfig
from trtserve.engine.pooling import SCORE, PoolingConfig, RerankPrompt
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.layout import EMBED, LM_HEAD
from trtserve.models.pooling import pooling_task

HEAD_SOURCES = {"score.weight": SCORE}  # a classification checkpoint's head tensor -> pooling.safetensors name


class PoolingReader(RenamedReader):
    """A pooling checkpoint through the CheckpointReader interface, as its family's causal LM: the decoder's
    tensors under the family's HF names, the head's tensors (`head_names`) left out for `load_head`."""

    def __init__(self, inner: CheckpointReader):
        super().__init__(inner)
        names = inner.names()
        self.head_names = sorted(n for n in names if n.split(".")[0] == "score")
        embed = self.family.hf.module(EMBED) + ".weight"  # "model.embed_tokens.weight"
        prefix = embed.split(".")[0] + "."
        bare = embed not in names and embed.removeprefix(prefix) in names  # saved by AutoModel: no `model.`
        self._source = {(prefix + n if bare else n): n for n in names if n not in self.head_names}

    def load_head(self, name: str) -> torch.Tensor:
        return self.inner.load(name)

    @property
    def has_lm_head(self) -> bool:
        return self.family.hf.module(LM_HEAD) + ".weight" in self._source


def pooling_reader(cfg: BuildConfig, reader: CheckpointReader) -> CheckpointReader:
    """The reader a build converts: a PoolingReader for a pooling build, else `reader` itself."""
    archs = list(getattr(reader.hf_config, "architectures", None) or [])
    if cfg.pooling is None and pooling_task(archs) is None:
        return reader
    if cfg.backend != "torch":
        raise UserError(f"pooling models are built for the torch backend only; leave out --backend {cfg.backend}")
    if cfg.quant:
        raise UserError("pooling models are built unquantized; leave out --quant")
    return PoolingReader(reader)


def pooled_model(model: ModelConfig, reader: CheckpointReader) -> ModelConfig:
    """A model without its own LM head converts with the embedding standing in for it (see the module doc)."""
    if isinstance(reader, PoolingReader) and not reader.has_lm_head and not model.tie_word_embeddings:
        return model.model_copy(update={"tie_word_embeddings": True})
    return model


def pooling_config(cfg: BuildConfig, reader: CheckpointReader, model: ModelConfig) -> PoolingConfig | None:
    """What the manifest records: the build's --pooling, else the task the checkpoint's architecture names."""
    if not isinstance(reader, PoolingReader):
        return None
    archs = list(getattr(reader.hf_config, "architectures", None) or [])
    named = pooling_task(archs)
    task = cfg.pooling or named
    if task == "classify" and SCORE not in {HEAD_SOURCES.get(n) for n in reader.head_names}:
        raise UserError(
            f"--pooling classify needs a sequence-classification checkpoint (a `score` head, e.g. "
            f"Qwen3ForSequenceClassification); {', '.join(archs) or 'this checkpoint'} has none"
        )
    if task != "classify" and reader.head_names:
        raise UserError(
            f"{', '.join(archs)} is a sequence classifier; build it with --pooling classify (or leave --pooling out)"
        )
    if task == "rerank" and not reader.has_lm_head and not model.tie_word_embeddings:
        raise UserError("--pooling rerank scores a causal LM's answer tokens, and this checkpoint has no LM head")
    if cfg.pooling_method == "mean" and task != "embed":
        raise UserError("--pooling-method mean applies to embedding models (--pooling embed) only")
    if task == "embed":
        return PoolingConfig(task="embed", method=cfg.pooling_method, dimensions=model.hidden_size)
    if task == "classify":
        rows = reader.inner.shape(reader.head_names[0])[0]
        id2label = getattr(reader.hf_config, "id2label", None) or {}
        labels = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(rows)]
        return PoolingConfig(task="classify", dimensions=rows, labels=labels)
    yes, no = (_token_id(reader, t) for t in cfg.rerank_tokens)
    return PoolingConfig(
        task="rerank", dimensions=1, labels=["relevant"], yes_token_id=yes, no_token_id=no, rerank_prompt=RerankPrompt()
    )


def _token_id(reader: PoolingReader, token: str) -> int:
    """The id of `token`, one token of the checkpoint's tokenizer.json."""
    from tokenizers import Tokenizer

    path = Path(reader.path) / "tokenizer.json"
    tid = Tokenizer.from_file(str(path)).token_to_id(token) if path.is_file() else None
    if tid is None:
        raise UserError(
            f"the tokenizer has no token {token!r}; --pooling rerank scores two answer tokens: name them with "
            "rerank_tokens in the build config"
        )
    return tid


def write_pooling_head(tmp: Path, config: PoolingConfig, reader: PoolingReader, model: ModelConfig) -> None:
    """pooling.safetensors in the staged dir: the head `config` names, in the model dtype (none for embed)."""
    from safetensors.torch import save_file

    if config.head is None:
        return
    dt = TORCH_DTYPES[model.dtype]
    if config.head == SCORE:
        weight = reader.load_head(reader.head_names[0])
        if tuple(weight.shape) != (config.dimensions, model.hidden_size):
            raise UserError(
                f"{reader.head_names[0]} has shape {list(weight.shape)}, but a classifier head of this model is "
                f"[{config.dimensions}, {model.hidden_size}]; the checkpoint is inconsistent"
            )
    else:
        head = LM_HEAD if reader.has_lm_head else EMBED
        rows = reader.load(reader.family.hf.module(head) + ".weight")  # (vocab, hidden)
        weight = rows[[config.yes_token_id, config.no_token_id]]
    save_file({config.head: weight.to(dt).contiguous()}, tmp / POOLING_WEIGHTS)
