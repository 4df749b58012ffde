"""Engine settings chosen at run time (the `run` YAML's engine section), for every backend."""

from __future__ import annotations

from typing import Literal

from pydantic import ByteSize, ConfigDict, Field

from trtserve.engine.options import EngineOptions

# TensorRT-LLM's capacity scheduler policies (runtime/scheduler.py says what each does).
CapacityPolicy = Literal["guaranteed_no_evict", "max_utilization"]


class RuntimeConfig(EngineOptions):
    """Budgets and limits, plus the engine options (engine/options.py) as flat fields."""

    model_config = ConfigDict(extra="forbid")

    # The KV cache's size; engine/kv_sizing.py has the rule. An explicit budget wins over the rest.
    kv_cache_memory: ByteSize | None = None  # bytes for the KV cache (e.g. "2GiB"), on any device
    kv_cache_cpu_memory: ByteSize = ByteSize(4 << 30)  # the CPU default when kv_cache_memory is unset
    # Of the memory available at startup: on CUDA the KV cache's size, on CPU a ceiling on it.
    kv_cache_free_memory_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    # guaranteed_no_evict admits a request only when its worst case fits beside everything running;
    # max_utilization admits while the next chunk fits and preempts (recomputes) when blocks run out
    capacity_policy: CapacityPolicy = "guaranteed_no_evict"
    enable_prefix_caching: bool = True  # reuse the KV blocks of prompts that share a prefix
    max_batch_size: int | None = Field(None, ge=1)  # None: the engine's build limit
    # None: the engine's build limit; on a CPU at most 512 (runtime/sizing.py: default_step_tokens)
    max_num_tokens: int | None = Field(None, ge=1)
    device: str | None = None  # None: cuda if available, else cpu

    @property
    def options(self) -> EngineOptions:
        """The engine options alone: the one value the backends carry end to end."""
        return EngineOptions(**{name: getattr(self, name) for name in EngineOptions.model_fields})
