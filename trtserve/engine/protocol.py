"""The interface every backend implements; everything above it is shared by all backends.

    Engine: generate(request) -> async iterator of TokenDelta
            abort(request[, sequence]); invalidate_cache(namespace[, before_version]);
            load_adapter(name, path); unload_adapter(name); adapters();
            export_kv(handle); release_kv(handle); subscribe_kv_events(listener); sleep(); wake_up();
            stats(); health(); heartbeat(); tokenizer; shutdown(); info (identity, limits, capabilities)

Tokenizing, chat templates, detokenization, stop strings, admission, timeouts, metrics, HTTP are
the same code for the torch and TensorRT-LLM backends. `open_engine` (open.py) picks one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.ids import RequestId
from trtserve.engine.info import EngineInfo
from trtserve.engine.kv_cache_events import KVCacheListener
from trtserve.engine.kv_transfer import KVHandle, KVPayload
from trtserve.engine.messages import GenerateRequest, TokenDelta
from trtserve.engine.stats import EngineStats


@runtime_checkable
class Engine(Protocol):
    info: EngineInfo  # identity, limits and capabilities: all that serve/ may know of an engine
    tokenizer: Any  # engine/tokenizer.py (the HF tokenizer API trtserve uses), or a transformers tokenizer

    def check(self, request: GenerateRequest) -> None:
        """Raise UserError if the request can never run on this engine (e.g. too long)."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        """Stream the request's deltas until each of its n sequences has finished. Leaving the
        iterator early (cancel, disconnect) aborts what is still running."""

    def abort(self, request_id: RequestId, index: int | None = None) -> None:
        """Finish the request, or only its sequence `index`, by the engine's next step. Unknown or
        finished ids are ignored."""

    async def invalidate_cache(self, namespace: str | None, before_version: int | None = None) -> int:
        """Drop the prefix-cache entries of `namespace` (only versions < before_version, when given);
        requests running in it keep their blocks. Returns the blocks dropped. A backend without its
        own prefix cache raises UnsupportedError."""

    async def load_adapter(self, name: str, path: Path) -> AdapterRef:
        """Serve the PEFT LoRA adapter at `path` under `name` (info.capabilities.lora). A same-named
        adapter is replaced: requests already submitted finish on its old weights, later ones get the
        new. UserError when the adapter does not fit the base model (base, shapes, rank above
        max_lora_rank, target modules); UnsupportedError when this engine serves no adapters."""

    async def unload_adapter(self, name: str) -> None:
        """Stop serving `name`: later requests naming it are refused, submitted ones finish on it.
        Packed adapters (`build --lora`) can be unloaded too, until the engine restarts. UserError if
        no adapter of that name is served."""

    def adapters(self) -> list[AdapterRef]:
        """The adapters served now (GenerateRequest.adapter takes one of them); [] without LoRA."""

    async def export_kv(self, handle: KVHandle) -> KVPayload:
        """Copy out the prompt KV a finished KVHold request holds (engine/kv_transfer.py). UserError
        when it is no longer held (released or expired); UnsupportedError without kv_transfer."""

    def release_kv(self, handle: KVHandle) -> None:
        """Free the blocks a finished KVHold request holds, by the engine's next step. Unknown or
        already released handles are ignored."""

    def subscribe_kv_events(self, listener: KVCacheListener) -> Callable[[], None]:
        """Call `listener` on the engine's thread with every prefix-cache event from now on
        (engine/kv_cache_events.py); returns the function that unsubscribes it. UnsupportedError
        without kv_events."""

    async def sleep(self) -> None:
        """Let the requests in flight finish, then release the KV cache (on a GPU the weights too, to host
        memory); requests submitted meanwhile are refused with EngineAsleepError until wake_up().
        UnsupportedError where the backend cannot release its memory."""

    async def wake_up(self) -> None:
        """Restore what sleep() released; serving resumes (a no-op when awake)."""

    def stats(self) -> EngineStats: ...

    def health(self) -> bool:
        """False once the engine can no longer serve (its loop died or it was shut down)."""

    def heartbeat(self) -> float:
        """time.monotonic() when the engine loop last turned (a step or an idle tick): serve's
        watchdog tells a stalled engine from a busy one by it."""

    def shutdown(self) -> None:
        """Stop the engine and release its memory; blocks until it has stopped."""
