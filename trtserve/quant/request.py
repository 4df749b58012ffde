"""What quant/ needs from a build, as protocols: build/ drives quant/, so quant/ imports nothing of it
(build/config.py's BuildConfig and build/reader.py's CheckpointReader satisfy these)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch

from trtserve.models.family import DecoderFamily


class QuantRequest(Protocol):
    """The --quant flags of a build."""

    quant: str | None  # a --quant value of models/quant_formats.py; None: unquantized
    kv_cache_quant: str | None  # a --kv-cache-quant value
    group_size: int  # inputs per int4 scale
    smoothquant_alpha: float | None  # None: 0.5
    calib_size: int  # calibration windows
    calib_seq_len: int  # tokens per window
    calib_data: Path | None  # TXT or JSONL; None: docstrings of the Python standard library
    tp_size: int
    backend: str  # a name of trtserve/engine/backends.py


class TensorSource(Protocol):
    """A source checkpoint with HF tensor names, read one tensor at a time."""

    hf_config: object  # transformers.PretrainedConfig
    family: DecoderFamily  # its tensor names and fusions

    def names(self) -> list[str]: ...

    def load(self, name: str) -> torch.Tensor: ...
