"""The backends, one declarative spec each: the only place their names are spelled.

A backend's Engine class and its pre-serve check are named as "module:attribute" and imported
only when an engine of that backend is opened, so the contract imports no backend (and no torch,
no tensorrt_llm) itself.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from trtserve.engine.errors import UserError


@dataclass(frozen=True)
class BackendSpec:
    name: str  # manifest.json's `backend`, `trtserve build --backend`
    engine: str  # "module:Class" implementing engine.protocol.Engine, built as Class(engine_dir, RuntimeConfig)
    platform: str  # the platform KServe / Triton metadata report
    target_device: str  # what `build` targets: "cpu" (runs on CUDA too) or "cuda"
    preflight: str | None  # "module:function(engine_dir, manifest)": raise UserError before serving if it cannot run
    summary: str


BACKENDS: dict[str, BackendSpec] = {
    b.name: b
    for b in (
        BackendSpec(
            "torch",
            "trtserve.backends.torch_engine:TorchEngine",
            "trtserve_torch",
            "cpu",
            None,
            "the embedded PyTorch engine (CPU or CUDA)",
        ),
        BackendSpec(
            "tensorrt",
            "trtserve.backends.tensorrt_llm.engine:TrtllmEngine",
            "tensorrt_llm",
            "cuda",
            "trtserve.backends.tensorrt_llm.llm:preflight",
            "TensorRT engines from trtllm-build (TensorRT-LLM <= 1.2)",
        ),
        BackendSpec(
            "trtllm",
            "trtserve.backends.tensorrt_llm.engine:TrtllmEngine",
            "tensorrt_llm",
            "cuda",
            "trtserve.backends.tensorrt_llm.llm:preflight",
            "TensorRT-LLM's PyTorch backend over the Hugging Face checkpoint",
        ),
    )
}


def backend_spec(name: str) -> BackendSpec:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UserError(
            f"backend {name!r} is unknown to this trtserve (it knows {', '.join(BACKENDS)}); rebuild the engine"
        ) from None


def resolve(ref: str):
    """Import "module:attribute" and return the attribute."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
