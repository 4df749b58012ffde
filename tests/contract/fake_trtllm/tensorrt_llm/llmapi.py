"""Fake `tensorrt_llm.llmapi` (1.0): the config classes the adapter builds, and RequestError."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KvCacheConfig:
    enable_block_reuse: bool = True
    max_tokens: int | None = None
    max_attention_window: list | None = None
    sink_token_length: int | None = None
    free_gpu_memory_fraction: float | None = None
    host_cache_size: int | None = None
    onboard_blocks: bool = True
    dtype: str = "auto"

    def __post_init__(self):
        f = self.free_gpu_memory_fraction
        if f is not None and not 0 < f < 1:
            raise ValueError("free_gpu_memory_fraction must be in (0, 1)")


@dataclass
class CudaGraphConfig:
    batch_sizes: list | None = None
    max_batch_size: int = 0
    enable_padding: bool = False


class RequestError(RuntimeError):
    """A request failed in the executor (tensorrt_llm.executor.utils.RequestError)."""
