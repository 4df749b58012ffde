"""Where the per-release TensorRT-LLM fakes live, and their toy model loaded on its own.

fake_trtllm/trtllm_fake_core/      shared machinery (not TensorRT-LLM's API)
fake_trtllm/releases/<release>/    a `tensorrt_llm` package (and bin/ where it has trtllm-build)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

FAKE_PATH = Path(__file__).parent / "fake_trtllm"
RELEASES = ("1.0", "1.1", "1.2", "main")  # every contract test runs against each
TENSORRT_RELEASES = ("1.0", "1.1", "1.2")  # the ones with the TensorRT backend (trtllm-build, _tensorrt_engine)


def release_root(release: str) -> Path:
    return FAKE_PATH / "releases" / release


def release_paths(release: str) -> list[str]:
    """sys.path entries for `import tensorrt_llm` to load the fake of `release`: its root, then the core."""
    return [str(release_root(release)), str(FAKE_PATH)]


def pythonpath(release: str, *more: str) -> str:
    return os.pathsep.join([*release_paths(release), *more, os.environ.get("PYTHONPATH", "")])


def load_toy_model():
    """The fakes' toy model module, loaded by file so `tensorrt_llm` stays unimportable in-process."""
    return _load_core("toy_model")


def load_fake_lora():
    """The fakes' LoRA module (adapter_offset: an adapter's toy weights), loaded as load_toy_model is."""
    return _load_core("lora")


def _load_core(name: str):
    spec = importlib.util.spec_from_file_location(f"fake_trtllm_{name}", FAKE_PATH / "trtllm_fake_core" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
