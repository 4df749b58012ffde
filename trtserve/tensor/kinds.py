"""The tensor-model kinds: one entry per kind, naming the platforms / backends a config.pbtxt uses
for it, the file its version dir holds, and the function that opens it. Adding a kind is one entry."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.tensor.types import ModelKind, Resolver, TensorModel, TensorModelConfig


@dataclass(frozen=True)
class KindSpec:
    name: ModelKind
    platforms: tuple[str, ...]  # ModelConfig.platform spellings
    backends: tuple[str, ...]  # ModelConfig.backend spellings
    metadata_platform: str  # what the model's metadata calls its platform
    default_filename: str | None  # the file in each version dir; None: the kind has none (ensembles)
    batched: bool  # requests go through the dynamic batcher (ensembles: their steps' batchers)
    opener: str  # "module:function"(config, version_dir, resolve) -> TensorModel


KINDS: dict[str, KindSpec] = {
    "onnx": KindSpec(
        "onnx",
        ("onnxruntime_onnx",),
        ("onnxruntime",),
        "onnxruntime_onnx",
        "model.onnx",
        True,
        "trtserve.tensor.onnx_model:open_onnx",
    ),
    "python": KindSpec(
        "python", (), ("python",), "python", "model.py", True, "trtserve.tensor.python_model:open_python"
    ),
    "ensemble": KindSpec(
        "ensemble", ("ensemble",), (), "ensemble", None, False, "trtserve.tensor.ensemble:open_ensemble"
    ),
}


def kind_of(platform: str, backend: str, model: str) -> KindSpec:
    """The kind a config's platform / backend names; UserError naming what is supported otherwise."""
    for spec in KINDS.values():
        if (platform and platform in spec.platforms) or (backend and backend in spec.backends):
            return spec
    given = f"platform {platform!r}" if platform else f"backend {backend!r}" if backend else "no platform or backend"
    known = ", ".join(f"backend {b!r}" for s in KINDS.values() for b in s.backends)
    known += ", " + ", ".join(f"platform {p!r}" for s in KINDS.values() for p in s.platforms)
    raise UserError(f"model {model!r}: config.pbtxt has {given}; trtserve serves {known}")


def open_model(config: TensorModelConfig, version_dir: Path, resolve: Resolver) -> TensorModel:
    """Open one version (blocking: sessions load, model.py's initialize runs)."""
    module, func = KINDS[config.kind].opener.split(":")
    return getattr(importlib.import_module(module), func)(config, Path(version_dir), resolve)
