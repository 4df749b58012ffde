"""Fake `tensorrt_llm._tensorrt_engine` (1.x): the LLM class for TensorRT engine dirs."""

from tensorrt_llm import LLM  # noqa: F401 - same contract in this fake
