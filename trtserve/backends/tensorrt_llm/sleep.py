"""Sleep and wake-up on TensorRT-LLM: the PyTorch executor's memory under a virtual-memory allocator.

An LLM created with sleep on (`enable_sleep: true` in 1.1-1.2, `sleep_config` on main; trtserve's
options set only the latter, serve_plan.SLEEP_BY_DEFAULT) releases the memory of
the given `ExecutorMemoryType` tags on `LLM._collective_rpc("sleep", (tags,))` and restores it on
`_collective_rpc("wakeup", (tags,))` (upstream's tests/unittest/llmapi/test_llm_sleep*.py). It is a
private call of TensorRT-LLM's LLM, so its name is kept here and nowhere else. TensorRT engines and
1.0 have nothing of the kind. On main the worker's sleep raises NotImplementedError unless world_size is 1
(executor/base_worker.py), so a tensor-parallel engine is refused here first.

Prefix reuse across a sleep: the KV cache's memory comes back on wakeup without its contents (main's
`_torch/virtual_memory.py` scopes it with RestoreMode.NONE unless `sleep_config.restore_modes` says
otherwise, and `BaseWorker.wakeup` only calls `materialize_with_tag`), while the KV cache manager keeps
its reuse tree, so a request after the wake-up would reuse pre-sleep blocks that now hold garbage.
Each wake-up therefore starts a new cache-salt epoch: every later request carries a `cache_salt` that
no pre-sleep block was hashed with (`hashV1BlockKey` takes the salt's id), and reuse resumes among
post-wake requests.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from types import ModuleType

from trtserve.backends.tensorrt_llm.capabilities import Capabilities
from trtserve.backends.tensorrt_llm.serve_plan import SLEEP_BY_DEFAULT
from trtserve.engine.errors import EngineAsleepError, UnsupportedError

# where ExecutorMemoryType lives: llm_args on main, the virtual-memory module before
TAG_MODULES = ("llmapi.llm_args", "_torch.virtual_memory")
DRAIN_POLL_S = 0.02  # while sleep() waits for the requests in flight


def sleep_problem(caps: Capabilities, backend: str, options: dict, tp: int = 1) -> str | None:
    """Why this engine cannot sleep, as one sentence; None if it can. tp: its tensor_parallel_size."""
    if backend != "trtllm":
        return "sleep / wake-up is not available on TensorRT engines (--backend tensorrt); serve a trtllm or torch engine dir"
    if caps.sleep_arg is None:
        return f"{caps.label} has no sleep / wake-up; use TensorRT-LLM 1.1 or later, or the torch backend"
    if caps.sleep_arg not in SLEEP_BY_DEFAULT:
        return (
            f"{caps.label} has sleep / wake-up only with {caps.sleep_arg}, which upstream runs without CUDA graphs, "
            "so trtserve leaves it off; use TensorRT-LLM 1.3 or later (sleep_config) or the torch backend"
        )
    if options.get(caps.sleep_arg) in (None, False):
        return (
            f"this engine dir's TensorRT-LLM options lack {caps.sleep_arg} (it was planned for a release without "
            "it); rebuild it with `trtserve build ... --backend trtllm --force` on this host"
        )
    if tp > 1:
        return (
            f"sleep / wake-up on {caps.label} needs a single GPU (its worker releases memory only with world_size "
            f"1), but this engine dir runs tensor-parallel on {tp}; build it with --tp-size 1 to sleep, or serve it "
            "without sleep"
        )
    return None


def memory_tags(tllm: ModuleType) -> list:
    """Every ExecutorMemoryType member of this TensorRT-LLM (weights, KV cache, engine, ...)."""
    for name in TAG_MODULES:
        try:
            tags = getattr(importlib.import_module(f"{tllm.__name__}.{name}"), "ExecutorMemoryType", None)
        except ImportError:
            tags = None
        if tags is not None:
            return list(tags)
    raise UnsupportedError(f"TensorRT-LLM {getattr(tllm, '__version__', '')} has no ExecutorMemoryType; cannot sleep")


class Sleeper:
    """The engine's sleep state: from sleep() until wake_up() new requests get EngineAsleepError (HTTP 503);
    sleep() lets the requests in flight finish before the memory goes."""

    def __init__(self, tllm: ModuleType, caps: Capabilities, backend: str, options: dict, tp: int = 1):
        self._tllm, self._problem = tllm, sleep_problem(caps, backend, options, tp)
        self.llm = None  # set once the LLM exists
        self.asleep = False  # refusing requests (from the start of sleep() to the end of wake_up())
        self._released = False
        self.wakes = 0  # wake-ups after a release: the cache-salt epoch of requests from now on

    def check_awake(self) -> None:
        if self.asleep:
            raise EngineAsleepError("the engine is asleep (its GPU memory is released); retry after wake-up")

    async def sleep(self, running: Callable[[], int]) -> None:
        if self._problem is not None:
            raise UnsupportedError(self._problem)
        self.asleep = True
        while running():
            await asyncio.sleep(DRAIN_POLL_S)
        if not self._released:
            await asyncio.to_thread(self.llm._collective_rpc, "sleep", (memory_tags(self._tllm),))
            self._released = True

    async def wake_up(self) -> None:
        if self._problem is not None:
            raise UnsupportedError(self._problem)
        if self._released:
            await asyncio.to_thread(self.llm._collective_rpc, "wakeup", (memory_tags(self._tllm),))
            self._released = False
            self.wakes += 1  # the KV contents are gone: no later request may match a pre-sleep block
        self.asleep = False

    def cache_salt(self) -> str | None:
        """The `cache_salt` every request carries from now on (None before the first wake-up); a client's
        own cache_salt is refused on this backend (sampling.check_supported), so this is the only one."""
        return f"trtserve-wake-{self.wakes}" if self.wakes else None
