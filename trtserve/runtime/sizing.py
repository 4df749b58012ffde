"""How big the torch engine's KV cache and a step's token budget are, on the device it runs on."""

from __future__ import annotations

import logging

import psutil
import torch

from trtserve.engine import kv_sizing
from trtserve.engine.errors import UserError
from trtserve.engine.kv_sizing import KVCacheSize
from trtserve.engine.run_config import RuntimeConfig
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.scheduler import SchedulerConfig

log = logging.getLogger(__name__)


def available_memory(device: torch.device) -> int:
    """Bytes free for the KV cache now: free GPU memory on CUDA, available RAM on CPU."""
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else psutil.virtual_memory().available


def size_kv_cache(engine: LoadedEngine, cfg: RuntimeConfig, max_batch_size: int) -> KVCacheSize:
    """The KV cache `cfg` gives this engine on its device (engine/kv_sizing.py has the rule).
    An explicit budget larger than the memory available is refused now rather than failing later."""
    dev = engine.model.device
    available = available_memory(dev)
    m, b = engine.config.pretrained_config, engine.config.build_config
    size = kv_sizing.size_kv_cache(m, b, cfg, device=dev.type, available=available, max_batch_size=max_batch_size)
    if cfg.kv_cache_memory is not None and int(cfg.kv_cache_memory) > available:
        raise UserError(
            f"kv_cache_memory ({int(cfg.kv_cache_memory) / 2**30:.2f} GiB) is more than the "
            f"{available / 2**30:.2f} GiB of memory available on {dev.type}; give a smaller kv_cache_memory"
        )
    return size


CPU_STEP_TOKENS = 512


def default_step_tokens(engine: LoadedEngine) -> int:
    """A step's token budget where the run config sets none: the build limit on a GPU; on a CPU at most
    CPU_STEP_TOKENS, so long prompts are computed in chunks of that many tokens with the running
    decodes beside them. A 512-row GEMM is where torch's CPU GEMM reaches its rate (bench/floor.py
    measures it there) and a step's activations stay in the L3; one 8,192-token step runs the GEMMs
    slower and holds every decode back for its whole length (docs/performance.md has the figures)."""
    limit = engine.config.build_config.max_num_tokens
    return min(CPU_STEP_TOKENS, limit) if engine.model.device.type == "cpu" else limit


def scheduler_config(engine: LoadedEngine, cfg: RuntimeConfig) -> SchedulerConfig:
    """The scheduler's budgets: the run config's, within the engine's build limits."""
    b = engine.config.build_config
    return SchedulerConfig(
        max_num_tokens=min(cfg.max_num_tokens or default_step_tokens(engine), b.max_num_tokens),
        max_batch_size=b.batch_limit(cfg.max_batch_size),
        max_seq_len=b.max_seq_len,
        policy=cfg.capacity_policy,
    )


def sized_num_blocks(engine: LoadedEngine, cfg: RuntimeConfig, max_batch_size: int) -> int:
    """The KV cache's blocks by the run config (size_kv_cache), its plan logged."""
    size = size_kv_cache(engine, cfg, max_batch_size)
    log.info("%s", size.describe())
    return size.num_blocks
