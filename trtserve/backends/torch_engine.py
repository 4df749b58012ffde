"""The torch backend: the Engine interface over EngineCore, stepping in its own thread.

The caller's event loop never blocks on the model: requests and aborts go to the engine thread
through a queue; deltas come back through each request's asyncio.Queue.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import trtserve
from trtserve.engine.adapters import AdapterRef
from trtserve.engine.backends import backend_spec
from trtserve.engine.errors import EngineAsleepError, EngineDeadError
from trtserve.engine.ids import RequestId
from trtserve.engine.info import Capabilities, EngineInfo
from trtserve.engine.kv_cache_events import KVCacheListener
from trtserve.engine.kv_transfer import KVHandle, KVPayload
from trtserve.engine.manifest import engine_fingerprint
from trtserve.engine.messages import GenerateRequest, TokenDelta
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import MAX_LOGPROBS
from trtserve.engine.stats import EngineStats
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine

log = logging.getLogger(__name__)
INVALIDATE_TIMEOUT_S = 30.0  # a live engine thread answers within one step
# What EngineCore implements: its scheduler orders by priority, its sampler returns any top-N up to
# SamplingParams' limit and prompt logprobs, its grammars guide, its prefix cache drops namespaces.
CAPABILITIES = Capabilities(
    priorities=True,
    logprobs=True,
    max_top_logprobs=MAX_LOGPROBS,
    prompt_logprobs=True,
    guided_decoding=True,
    cache_invalidation=True,
    lora=True,
    kv_transfer=True,
    kv_events=True,
    thinking=True,
)
ADAPTER_TIMEOUT_S = 60.0  # loading one adapter (read, check, convert) between two steps
SLEEP_TIMEOUT_S = 120.0  # releasing or remaking the KV cache (and moving weights) between two steps
ASLEEP = "the engine is asleep (POST /admin/wake_up wakes it); retry later"


def _ignore(result, err: BaseException | None) -> None:
    """The reply of an engine-thread call nobody waits for."""


@dataclass
class _Sink:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    n: int  # sequences to wait for
    finished: set[int] = field(default_factory=set)

    def put(self, item) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class BusyClock:
    """Seconds a thread spent busy, readable from any thread, including the stretch in progress.

    The state is one tuple swapped whole, so a reader never sees a finished stretch counted twice.
    """

    def __init__(self):
        self._state: tuple[float, float | None] = (0.0, None)  # (finished seconds, start of the open stretch)

    def start(self) -> None:
        done, since = self._state
        if since is None:
            self._state = (done, time.monotonic())

    def stop(self) -> None:
        done, since = self._state
        if since is not None:
            self._state = (done + time.monotonic() - since, None)

    def seconds(self) -> float:
        done, since = self._state
        return done if since is None else done + time.monotonic() - since


class TorchEngine:
    """The Engine interface (trtserve/engine/protocol.py) over the torch EngineCore."""

    def __init__(self, engine_dir: str | Path, config: RuntimeConfig | None = None):
        cfg = config or RuntimeConfig()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[RequestId, _Sink] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dead: BaseException | None = None
        self._beat = time.monotonic()  # when the engine loop last finished a step or an idle tick
        self._busy = BusyClock()  # the engine thread's time in steps (trtserve_engine_busy_seconds_total)
        # The engine thread loads the model too, so that it is the only thread running OpenMP
        # regions. Once a second thread has its own OpenMP team, libgomp sees more threads than
        # cores and stops spinning between regions: each of a decode step's ~150 regions then
        # waits on a futex wake, which makes batch-1 decode far slower (docs/performance.md).
        loaded = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(engine_dir, cfg, loaded), name="trtserve-engine", daemon=True
        )
        self._thread.start()
        loaded.wait()
        if self._dead is not None:
            raise self._dead

    def _load(self, engine_dir: str | Path, cfg: RuntimeConfig) -> None:
        self.loaded = load_engine(engine_dir, cfg.device, cfg.options)
        self._startup = {"weights": self.loaded.weights_seconds}  # start-up phases (serve/startup.py)
        start = time.perf_counter()
        self.tokenizer = self.loaded.tokenizer
        self.core = EngineCore(self.loaded, cfg)
        manifest, limits = self.loaded.manifest, self.core.sched_config
        self.info = EngineInfo(
            backend=manifest.backend,
            backend_version=trtserve.__version__,  # the engine is trtserve's own
            platform=backend_spec(manifest.backend).platform,
            fingerprint=engine_fingerprint(manifest),
            max_seq_len=self.core.max_seq_len,
            max_batch_size=limits.max_batch_size,
            max_num_tokens=limits.max_num_tokens,
            options=cfg.options,
            capabilities=replace(CAPABILITIES, lora=self.core.lora.enabled),
            pooling=manifest.pooling,
            vision=manifest.vision,
        )
        self._startup["kv_cache"] = time.perf_counter() - start
        self._stats = self.core.stats()
        self._adapters = self._adapter_refs()
        self._asleep = False  # sleep() was called: new requests are refused until wake_up()

    # ---- the Engine interface ---------------------------------------------------------------
    def check(self, request: GenerateRequest) -> None:
        self.core.check(request)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        """Stream the request's deltas; leaving early (cancel, disconnect) aborts it."""
        if not self.health():
            raise EngineDeadError(f"the engine loop is not running ({self._dead_reason()})")
        if self._asleep:
            raise EngineAsleepError(ASLEEP)
        sink = _Sink(asyncio.get_running_loop(), asyncio.Queue(), request.params.n)
        self._inbox.put(("add", request, sink))
        self._wake.set()
        if not self.health():  # it died between the check and the put: nobody will read the inbox
            raise EngineDeadError(f"the engine loop is not running ({self._dead_reason()})")
        done = 0
        try:
            while done < request.params.n:
                item = await sink.queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item.finish_reason is not None:
                    done += 1
                yield item
        finally:
            if done < request.params.n:
                self.abort(request.request_id)

    def abort(self, request_id: RequestId, index: int | None = None) -> None:
        """Finish the request (or one of its sequences) by the next engine step."""
        self._inbox.put(("abort", request_id, index))
        self._wake.set()

    async def invalidate_cache(self, namespace: str | None, before_version: int | None = None) -> int:
        """Drop the namespace's cached prefixes in the engine thread; returns the blocks dropped."""
        return await self._call(self.core.invalidate_cache, namespace, before_version, timeout=INVALIDATE_TIMEOUT_S)

    async def load_adapter(self, name: str, path: Path) -> AdapterRef:
        """Load (or replace) adapter `name` in the engine thread, between two steps: no step sees half
        a registry, and the steps already running keep their adapters' weights."""
        return await self._call(self.core.lora.load, name, path, timeout=ADAPTER_TIMEOUT_S)

    async def unload_adapter(self, name: str) -> None:
        await self._call(self.core.lora.unload, name, timeout=ADAPTER_TIMEOUT_S)

    def adapters(self) -> list[AdapterRef]:
        return list(self._adapters)  # the engine thread's snapshot after its last change

    def _adapter_refs(self) -> tuple[AdapterRef, ...]:
        return tuple(self.core.lora.refs())

    async def _call(self, fn, *args, timeout: float):
        """fn(*args) in the engine thread; its result, or its exception, here."""
        if not self.health():
            raise EngineDeadError(f"the engine loop is not running ({self._dead_reason()})")
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def reply(result, err: BaseException | None) -> None:  # called in the engine thread
            settle = (lambda: done.set_exception(err)) if err is not None else (lambda: done.set_result(result))
            loop.call_soon_threadsafe(lambda: None if done.done() else settle())

        self._inbox.put(("call", fn, args, reply))
        self._wake.set()
        return await asyncio.wait_for(done, timeout)

    async def export_kv(self, handle: KVHandle) -> KVPayload:
        """Copy the held prompt KV out in the engine thread, between two steps."""
        return await self._call(self.core.handoff.export, handle, timeout=INVALIDATE_TIMEOUT_S)

    def release_kv(self, handle: KVHandle) -> None:
        self._inbox.put(("call", self.core.handoff.release, (handle,), lambda result, err: None))
        self._wake.set()

    def subscribe_kv_events(self, listener: KVCacheListener) -> Callable[[], None]:
        """The engine thread subscribes it before its next step; the returned function unsubscribes it."""
        subscribed: list = []

        def subscribe() -> None:
            subscribed.append(self.core.subscribe_kv_events(listener))

        def unsubscribe() -> None:
            self._inbox.put(("call", lambda: [self.core.blocks.unsubscribe(s) for s in subscribed], (), _ignore))
            self._wake.set()

        self._inbox.put(("call", subscribe, (), _ignore))
        self._wake.set()
        return unsubscribe

    async def sleep(self) -> None:
        """Refuse new requests, let those in flight finish, then release the KV cache between two steps."""
        self._asleep = True
        while True:
            while self._sinks:  # requests in flight (a request added as sleep began shows up here too)
                await asyncio.sleep(0.02)
            if await self._call(self._sleep_if_idle, timeout=SLEEP_TIMEOUT_S):
                return

    def _sleep_if_idle(self) -> bool:
        """In the engine thread: sleep unless a request slipped in (False: wait for it and try again)."""
        if self.core.asleep:
            return True
        if self.core.has_unfinished():
            return False
        self.core.sleep()
        return True

    async def wake_up(self) -> None:
        await self._call(self.core.wake_up, timeout=SLEEP_TIMEOUT_S)
        self._asleep = False

    def stats(self) -> EngineStats:
        # a snapshot taken by the engine thread after each step; busy time is read live, so it moves during a step
        return replace(self._stats, busy_seconds=self._busy.seconds(), startup_seconds=self._startup)

    def health(self) -> bool:
        return self._thread.is_alive() and self._dead is None and not self._stop.is_set()

    def heartbeat(self) -> float:
        return self._beat

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    # ---- the engine thread ------------------------------------------------------------------
    def _run(self, engine_dir: str | Path, cfg: RuntimeConfig, loaded: threading.Event) -> None:
        try:
            self._load(engine_dir, cfg)
        except BaseException as err:  # a bad engine dir: the constructor raises it
            self._dead = err
            return
        finally:
            loaded.set()
        try:
            while not self._stop.is_set():
                self._drain_inbox()
                if self.core.has_unfinished():
                    self._busy.start()
                    try:
                        deltas = self.core.step()
                    finally:
                        self._busy.stop()
                    self._stats = self.core.stats()  # before delivery: a caller who saw the step sees its stats
                    self._deliver(deltas)
                else:
                    if not self.core.idle():  # its work done, the loop waits for requests
                        self._wake.wait(0.05)
                        self._wake.clear()
                    self.core.features.tick()  # expires held KV nobody pulled, writes the second tier's index
                    self._stats = self.core.stats()
                self._beat = time.monotonic()
            self.core.close()  # a clean stop: the second KV tier keeps the cached prefixes for the next start
        except BaseException as err:  # a bug outside a step: the loop is dead, say so everywhere
            log.exception("engine loop died")
            self._dead = err
            self._fail_all(EngineDeadError(f"the engine loop died ({self._dead_reason()})"))

    def _dead_reason(self) -> str:
        err = self._dead
        return "shut down" if err is None else f"{type(err).__name__}: {err}"

    def _fail_all(self, err: EngineDeadError) -> None:
        """Fail every request the dead loop held or had not yet taken from its inbox."""
        for sink in self._sinks.values():
            sink.put(err)
        self._sinks.clear()
        while True:
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                return
            if msg[0] == "add":
                msg[2].put(err)
            elif msg[0] == "call":
                msg[3](None, err)

    def _drain_inbox(self) -> None:
        while True:
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                return
            if msg[0] == "add":
                _, request, sink = msg
                try:
                    self.core.add_request(request)
                except Exception as err:  # e.g. the KV cache changed size under it; the caller sees it
                    sink.put(err)
                    continue
                self._sinks[request.request_id] = sink
            elif msg[0] == "call":
                _, fn, args, reply = msg
                try:
                    result, err = fn(*args), None
                except Exception as e:  # a UserError for the caller (a bad adapter), not the engine's death
                    result, err = None, e
                self._adapters = self._adapter_refs()
                reply(result, err)
            else:
                _, request_id, index = msg
                self._deliver(self.core.abort(request_id, index))
            self._stats = self.core.stats()

    def _deliver(self, deltas: list[TokenDelta]) -> None:
        for d in deltas:
            sink = self._sinks.get(d.request_id)
            if sink is None:
                continue
            sink.put(d)
            if d.finish_reason is not None:
                sink.finished.add(d.index)
                if len(sink.finished) >= sink.n:
                    del self._sinks[d.request_id]
