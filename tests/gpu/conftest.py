"""GPU tests: real TensorRT-LLM builds and serving, skipped without CUDA and tensorrt_llm."""

from __future__ import annotations

import importlib.util

import pytest
import torch


def _why_skip() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if importlib.util.find_spec("tensorrt_llm") is None:
        return 'needs TensorRT-LLM (pip install "trtserve[tensorrt]", see docs/tensorrt-llm.md)'
    return None


def pytest_collection_modifyitems(config, items):
    reason = _why_skip()
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def gpu_llama(tmp_path_factory):
    """A random fp16 Llama with head_dim 64 (TensorRT-LLM's attention kernels want common head sizes)."""
    from helpers import make_hf_model

    return make_hf_model(
        tmp_path_factory.mktemp("gpu-llama"),
        "llama",
        dtype=torch.float16,
        hidden_size=256,
        intermediate_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
