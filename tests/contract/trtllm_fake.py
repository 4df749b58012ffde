"""Where the TensorRT-LLM contract fake lives, and its toy model loaded on its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

FAKE_PATH = Path(__file__).parent / "fake_trtllm"


def load_toy_model():
    """The fake's toy model module, loaded by file so `tensorrt_llm` stays unimportable in-process."""
    spec = importlib.util.spec_from_file_location("fake_trtllm_toy_model", FAKE_PATH / "tensorrt_llm" / "_toy_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
