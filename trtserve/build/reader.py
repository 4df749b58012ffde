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

    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def load(self, name: str) -> torch.Tensor: ...

    def save_tokenizer(self, dest: Path) -> None: ...

    def fingerprint(self) -> str: ...
