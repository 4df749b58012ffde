"""tensorrt_llm/_torch/virtual_memory.py (1.1-1.2): the executor's memory tags sleep releases."""

from trtllm_fake_core.args import ExecutorMemoryType  # noqa: F401
