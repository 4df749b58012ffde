"""Where TensorRT-LLM comes from, importing it lazily, and what is installed on this host."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import ModuleType

from trtserve.engine.errors import UserError

# TensorRT-LLM's wheels and TensorRT's libraries come from NVIDIA's index (docs/tensorrt-llm.md).
INSTALL_COMMAND = 'pip install "trtserve[tensorrt]" --extra-index-url https://pypi.nvidia.com'


def import_tensorrt_llm() -> ModuleType:
    """Import tensorrt_llm, or raise a UserError that says how to install it."""
    try:
        import tensorrt_llm
    except ImportError as err:
        raise UserError(
            f"this needs TensorRT-LLM, which is not installed ({err}); on a host with an NVIDIA GPU "
            f"install it with `{INSTALL_COMMAND}`"
        ) from None
    return tensorrt_llm


@dataclass
class Target:
    """The toolchain and GPU an engine is built for or runs on (None: unknown / absent)."""

    tensorrt_llm: str | None = None  # TensorRT-LLM version, e.g. "0.19.0"
    tensorrt: str | None = None  # TensorRT version, e.g. "10.9.0.34"
    cuda: str | None = None  # CUDA runtime version torch was built with, e.g. "12.8"
    gpu_name: str | None = None  # e.g. "NVIDIA H100 80GB HBM3"
    sm: str | None = None  # compute capability, e.g. "9.0"

    def to_dict(self) -> dict:
        return asdict(self)


def installed_target(tensorrt_llm: ModuleType | None = None) -> Target:
    """What this host has: TensorRT-LLM (from the module if given), TensorRT, CUDA and GPU 0."""
    import torch

    t = Target()
    if tensorrt_llm is not None:
        t.tensorrt_llm = str(getattr(tensorrt_llm, "__version__", None) or "") or None
    else:  # without importing it (slow, and it needs a GPU)
        t.tensorrt_llm = _dist_version("tensorrt_llm")
    t.tensorrt = _module_version("tensorrt")
    t.cuda = torch.version.cuda
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        t.gpu_name, t.sm = torch.cuda.get_device_name(0), f"{major}.{minor}"
    return t


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _module_version(name: str) -> str | None:
    import importlib

    try:
        return str(importlib.import_module(name).__version__)
    except (ImportError, AttributeError):
        return None
