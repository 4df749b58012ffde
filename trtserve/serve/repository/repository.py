"""The model repository of a running server: its models, routing a request to a version, and
loading / unloading versions in the background while the others keep serving.

It owns versions and their lifecycle only: it opens an engine through its factory and tells its
listeners (`on_ready`, `on_release`) when a version is about to serve and when it stops; the app
(serve/app.py) registers the listener that puts a GenerationService over the engine.

Invariants: a version is routed to only while READY; a load that fails leaves every other version
as it was; an unload (or a failed engine) never routes another model's answer to a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.open import open_engine, preflight
from trtserve.engine.protocol import Engine
from trtserve.engine.run_config import RuntimeConfig
from trtserve.serve.config import ServeConfig
from trtserve.serve.errors import APIError
from trtserve.serve.kv_offload import with_tier_path
from trtserve.serve.repository import adapters as lora
from trtserve.serve.repository.budget import KVBudget
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.router import Target, parse_target
from trtserve.serve.repository.scan import scan, scan_versions
from trtserve.serve.repository.tensors import is_ensemble, wanted_versions
from trtserve.serve.repository.tensors import resolve as resolve_tensor
from trtserve.serve.repository.version import ModelVersion, State
from trtserve.serve.telemetry.metrics import Metrics
from trtserve.tensor.types import TensorModel

log = logging.getLogger(__name__)
EngineFactory = Callable[[Path, RuntimeConfig], Engine]
# Called with a version whose engine is open, before it is routed to; raising fails the load.
ReadyListener = Callable[[ModelVersion], Awaitable[None]]
ReleaseListener = Callable[[ModelVersion], None]  # called before its engine shuts down
DRAIN_POLL = 0.02  # s between in-flight checks while a version drains


def default_engine_factory(engine_dir: Path, run: RuntimeConfig) -> Engine:
    """Verify the dir against its manifest, then open the engine its backend names (blocking)."""
    preflight(engine_dir)
    return open_engine(engine_dir, run)


class Repository:
    def __init__(
        self,
        root: Path,
        config: ServeConfig,
        metrics: Metrics,
        factory: EngineFactory | None = None,
        mode: str = "none",
    ):
        self.root, self.config, self.metrics, self.mode = Path(root), config, metrics, mode
        self.factory = factory or default_engine_factory
        self.models: dict[str, RepoModel] = scan(self.root, config.model_name)
        self.single = len(self.models) == 1 and next(iter(self.models.values())).dir is None
        self.budget = KVBudget(config.engine, self.models, single=self.single)
        self.observers: list[Callable] = []  # (version, run, ok) after every client request: shadow, guard
        self.on_ready: list[ReadyListener] = []
        self.on_release: list[ReleaseListener] = []
        self.started = False  # the start-up loads have finished (successfully or not)
        self._opening = asyncio.Lock()
        self.shadow = None  # watch.py's ShadowMirror and GuardWatch, set by install_watchers
        self.kv_tier_root: Path | None = None  # where kv_offload tiers without a path live (the app sets it)
        self.guard = None

    # ---- lookup and routing ----------------------------------------------------------------------
    @property
    def default_name(self) -> str:
        return next(iter(self.models))

    def model(self, name: str | None, adapters: bool = False) -> RepoModel:
        """The model named `name` (None: the only one); `adapters`: a LoRA adapter's name gives its base."""
        if adapters and name is not None and (base := lora.base_of(self.models, name)) is not None:
            return base
        if name is None:
            if len(self.models) == 1:
                return self.models[self.default_name]
            raise APIError(400, f"name a model: this server serves {', '.join(map(repr, self.models))}", "model")
        found = self.models.get(name)
        if found is None:
            served = ", ".join(repr(m) for m in self.models)
            raise APIError(404, f"model {name!r} is not served here; this server serves {served}", "model")
        return found

    def route(self, spec: str | None, key: str | None = None, version: str | None = None) -> ModelVersion:
        """The READY version that answers `spec` (`name`, `name:V`, `name@L`; None: the only model)."""
        target = parse_target(spec, version) if spec is not None else Target(self.model(None).name)
        base = lora.base_of(self.models, target.model)  # a LoRA adapter's name: its base model's version
        m = base if base is not None else self.model(target.model)
        mv, decision = m.route(replace(target, model=m.name), key)
        self.metrics.routed.labels(mv.model, str(mv.version), decision).inc()
        return lora.bind(mv, target.model) if base is not None else mv

    def versions(self) -> list[ModelVersion]:
        return [mv for m in self.models.values() for _, mv in sorted(m.versions.items())]

    def index(self, ready_only: bool = False) -> list[dict]:
        return [mv.index_entry() for mv in self.versions() if not ready_only or mv.state == State.READY] + (
            lora.index_entries(self.models)
        )

    def is_ready(self) -> bool:
        """Every model that is loaded (or loading) has its default version ready."""
        return self.started and all(m.default_version() is not None for m in self.models.values() if m.wants_loaded())

    def alive(self) -> bool:
        served = [mv.served_model for mv in self.versions() if mv.state == State.READY and mv.served_model is not None]
        return any(s.health() for s in served) if served else self.started

    # ---- loading ---------------------------------------------------------------------------------
    async def startup(self) -> None:
        """With model control mode `none`, load what each policy names (and what its labels,
        weights and shadow route to); with `explicit`, nothing until asked."""
        try:
            if self.mode == "none":
                plans = [(m, set(self._wanted(m)) | m.policy.referenced()) for m in self.models.values()]
                for ensembles in (False, True):  # ensembles open after the models their steps name
                    jobs = [
                        self.load_version(m, m.versions[v])
                        for m, wanted in plans
                        if is_ensemble(m) == ensembles
                        for v in sorted(wanted)
                        if v in m.versions
                    ]
                    await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            self.started = True

    async def load(self, name: str, versions: list[int] | None = None, reload: bool = False) -> list[ModelVersion]:
        """Load `versions` of a model (default: what its version policy names); rescans its dir
        first so that versions built after start-up are found. `reload`: a READY version is loaded
        again from its dir beside the serving one, then swapped in. Raises APIError 400 if one fails."""
        m = self.model(name)
        if m.dir is not None:
            for v, mv in scan_versions(m.dir).items():
                m.versions.setdefault(v, mv)
        try:
            numbers = versions or wanted_versions(m)
        except UserError as err:  # a bad config.pbtxt
            raise APIError(400, f"failed to load {m.name}: {err}") from None
        targets = [m.version(v) for v in numbers]
        if reload:
            for mv in targets:
                await (self.replace_version(m, mv) if mv.state == State.READY else self.load_version(m, mv))
            targets = [m.versions[v] for v in numbers]
        else:
            await asyncio.gather(*(self.load_version(m, mv) for mv in targets))
        failed = [mv for mv in targets if mv.state != State.READY]
        if failed:
            raise APIError(400, "; ".join(f"failed to load {mv.name}: {mv.reason}" for mv in failed))
        return targets

    async def load_version(self, m: RepoModel, mv: ModelVersion) -> None:
        async with m.lock:
            if mv.state == State.READY:
                return  # loaded already: loading again changes nothing
            await self._open(mv)

    async def replace_version(self, m: RepoModel, old: ModelVersion) -> None:
        """The old engine serves until the new one is warm; then new requests go to the new one
        and the old drains. A failed reload leaves the old one serving."""
        async with m.lock:
            new = ModelVersion(old.model, old.version, old.path, kind=old.kind, config_dir=old.config_dir)
            await self._open(new)
            if new.state != State.READY:
                raise APIError(400, f"failed to reload {old.name} ({new.reason}); the loaded one keeps serving")
            m.versions[old.version] = new  # one assignment: the next request routes to the new engine
            await self._drain(old, self.config.drain_timeout)

    def _wanted(self, m: RepoModel) -> list[int]:
        """The versions start-up loads; a bad config.pbtxt makes the model UNAVAILABLE with its sentence."""
        try:
            return wanted_versions(m)
        except UserError as err:
            log.error("model %s: %s", m.name, err)
            for mv in m.versions.values():
                mv.state, mv.reason = State.UNAVAILABLE, str(err)
            return []

    def resolve(self, name: str, version: int) -> TensorModel:
        """tensor/types.py's Resolver over this repository: an ensemble's step -> its READY model."""
        return resolve_tensor(self.models, name, version)

    async def _open(self, mv: ModelVersion) -> None:
        """Reserve its KV budget (kinds that hold a KV cache), open it the way its kind does and warm it
        up (the ready listeners): READY, or UNAVAILABLE with why."""
        try:
            run = with_tier_path(self.budget.reserve(mv), self.kv_tier_root, mv.model, mv.version)
        except UserError as err:
            mv.state, mv.reason = State.UNAVAILABLE, str(err)
            raise APIError(400, str(err)) from None
        mv.state, mv.reason = State.LOADING, ""
        log.info("loading %s from %s", mv.name, mv.path)
        try:
            async with self._opening:  # one opens at a time (imports are not thread-safe)
                start = time.perf_counter()
                mv.served_model = await asyncio.to_thread(mv.kind.open, self, mv, run)
                mv.open_seconds = time.perf_counter() - start
            mv.kind.add_metrics(self.metrics, mv, mv.served_model)
            for ready in self.on_ready:
                await ready(mv)
            mv.state = State.READY
            log.info("ready: %s", mv.name)
        except Exception as err:  # the others keep serving; this one says why
            user = isinstance(
                err, UserError
            )  # a bad engine dir, run config or config.pbtxt: its sentence says what to fix
            log.error("loading %s failed: %s", mv.name, err, exc_info=not user)
            await self._release(mv)
            mv.state, mv.reason = State.UNAVAILABLE, str(err) if user else f"{type(err).__name__}: {err}"

    def finished(self, mv: ModelVersion, run, ok: bool) -> None:
        """A client request on `mv` ended (its GenerationService's observer): guards and shadows see it."""
        mv.record(ok, run.ttft)
        for observer in self.observers:
            observer(mv, run, ok)

    # ---- unloading -------------------------------------------------------------------------------
    async def unload(self, name: str, versions: list[int] | None = None) -> list[ModelVersion]:
        m = self.model(name)
        if self.single:
            raise APIError(
                501,
                f"trtserve cannot unload the model it serves from one engine dir ({name!r}); stop the server "
                "(SIGTERM drains it), or serve a repository (trtserve run REPO_DIR) to unload versions",
            )
        targets = [m.version(v) for v in versions] if versions else list(m.versions.values())
        await asyncio.gather(*(self.unload_version(m, mv) for mv in targets))
        return targets

    async def unload_version(self, m: RepoModel, mv: ModelVersion, timeout: float | None = None) -> None:
        """Drain: new requests go elsewhere at once, in-flight ones finish (or the drain timeout
        passes), then the engine stops and its memory goes back to the system."""
        async with m.lock:
            if mv.served_model is not None:
                await self._drain(mv, self.config.drain_timeout if timeout is None else timeout)

    async def _drain(self, mv: ModelVersion, limit: float) -> None:
        mv.state, mv.reason = State.UNLOADING, "draining"
        deadline = asyncio.get_running_loop().time() + limit
        while mv.in_flight > 0 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(DRAIN_POLL)
        await self._release(mv)
        mv.state, mv.reason = State.UNAVAILABLE, "unloaded"
        log.info("unloaded %s", mv.name)

    async def _release(self, mv: ModelVersion) -> None:
        for release in self.on_release:
            release(mv)
        served, mv.served_model = mv.served_model, None
        if served is not None:
            mv.kind.remove_metrics(self.metrics, mv, served)
        self.budget.release(mv)
        if served is not None:
            await asyncio.to_thread(served.shutdown)
        del served
        gc.collect()
        _trim_heap()

    async def shutdown(self) -> None:
        for mv in sorted(self.versions(), key=lambda v: v.tensor is None or v.tensor.config.kind != "ensemble"):
            if mv.served_model is not None:  # ensembles first: they hold their steps' models
                await asyncio.to_thread(mv.served_model.shutdown)


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise), so RSS falls after an unload."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
