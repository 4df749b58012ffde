"""What the converter needs from a checkpoint, whatever its format."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch

from trtserve.models.family import DecoderFamily


class CheckpointReader(Protocol):
    """A source checkpoint with HF tensor names; tensors are read one at a time."""

    path: Path  # the file or directory read
    family: DecoderFamily
    hf_config: object  # transformers.PretrainedConfig
    auto_dtype: str  # what `--dtype auto` resolves to: float32 | bfloat16 | float16
    description: str  # for logs and the manifest, e.g. "HF directory /x" or "GGUF file /y"
    config_origin: str  # where errors say the config came from: "config.json" or "the GGUF metadata"

    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def load(self, name: str) -> torch.Tensor: ...

    def save_tokenizer(self, dest: Path) -> None: ...

    def fingerprint(self) -> str: ...


class RenamedReader:
    """Another reader's checkpoint under other names (`_source`: the name given -> the inner reader's), the
    rest of the CheckpointReader interface passed through; pooling and vision checkpoints read as their
    text family's causal LM this way."""

    def __init__(self, inner: CheckpointReader):
        self.inner = inner
        self.path, self.family, self.hf_config = inner.path, inner.family, inner.hf_config
        self.auto_dtype, self.description, self.config_origin = inner.auto_dtype, inner.description, inner.config_origin
        self._source: dict[str, str] = {}

    def names(self) -> list[str]:
        return sorted(self._source)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.inner.shape(self._source[name])

    def load(self, name: str) -> torch.Tensor:
        return self.inner.load(self._source[name])

    def save_tokenizer(self, dest: Path) -> None:
        self.inner.save_tokenizer(dest)

    def fingerprint(self) -> str:
        return self.inner.fingerprint()
