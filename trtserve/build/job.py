"""What a build strategy prepares (`Job`) and what its tensor step wrote (`Written`): typed values
shared by the planner, the strategies and the tensor writers, so none of them imports another's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from trtserve.engine.model_config import ModelConfig


@dataclass(frozen=True)
class Written:
    model: ModelConfig  # as written to checkpoint/config.json (with `quantization` if quantized)
    checkpoint_bytes: int  # all rank files
    weight_bytes: int  # model.safetensors (what the torch engine loads); 0 where not written


@dataclass(frozen=True)
class Job:
    """A prepared build: everything that can fail before writing was checked."""

    write: Callable[[Path, Console], Written]  # (staged dir, console): the backend's files
    target: dict | None = None  # manifest.json's `target` (the TensorRT-LLM host), None: torch
