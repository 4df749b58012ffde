"""The FastAPI app: opens the model repository (an engine dir is a repository of one), loads its
versions in the background, and reports ready once every loaded model's default version is.

It is the composition root: it builds the repository, the front ends' routes and the features
(receipts, idempotency, batch jobs, watchers), and the listener that puts a GenerationService over
each version the repository loads. The repository knows nothing of front ends or features, and
features observe the generation path rather than being built into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.version import VERSION
from trtserve.serve import durable
from trtserve.serve.adapters import router as adapters_router
from trtserve.serve.anthropic.routes import install_anthropic
from trtserve.serve.batch.routes import router as batch_router
from trtserve.serve.config import ServeConfig
from trtserve.serve.errors import install_handlers
from trtserve.serve.generation import GenerationService
from trtserve.serve.idempotency import IdempotencyMiddleware
from trtserve.serve.kserve.routes import router as kserve_router
from trtserve.serve.kv_offload import tier_root
from trtserve.serve.load import LoadTracker
from trtserve.serve.middleware import ServerMiddleware
from trtserve.serve.openai.embeddings import router as embeddings_router
from trtserve.serve.openai.routes import router as openai_router
from trtserve.serve.openapi import HEALTH, V2_LIVE, V2_READY, install_openapi
from trtserve.serve.pooling.routes import router as pooling_router
from trtserve.serve.receipts.install import close_receipts, install_receipts
from trtserve.serve.repository import adapters as lora
from trtserve.serve.repository.admin import router as admin_router
from trtserve.serve.repository.repository import EngineFactory, Repository
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.repository.watch import install_watchers
from trtserve.serve.responses.routes import install_responses
from trtserve.serve.sleep import router as sleep_router
from trtserve.serve.state import ServerState
from trtserve.serve.telemetry.metrics import Metrics
from trtserve.serve.telemetry.startup import StartupClock
from trtserve.serve.telemetry.tracing import open_tracing

log = logging.getLogger(__name__)


def create_app(path: Path, config: ServeConfig, engine_factory: EngineFactory | None = None) -> FastAPI:
    """path: an engine dir or a model repository (serve/repository/scan.py).
    engine_factory(engine_dir, RuntimeConfig) -> an Engine (trtserve/engine/protocol.py); it is
    called in a worker thread so health checks and other models answer while it loads."""
    metrics = Metrics(config.model_name or Path(path).resolve().name)
    repository = Repository(Path(path), config, metrics, engine_factory, config.model_control_mode)
    metrics.model = repository.default_name
    server = ServerState(config, repository.default_name, repository=repository, metrics=metrics)
    install_watchers(repository)
    server.tracing = open_tracing(config)  # before serving: a missing trtserve[otel] fails here
    server.store = durable.open_store(config, server.model_name)  # before serving: a busy --state-dir fails here
    repository.kv_tier_root = tier_root(server.store)  # the kv_offload tiers' default home

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        grpc_server = await _start_grpc(server) if config.grpc_port is not None else None
        task = asyncio.create_task(_load(server))
        durable.start(app, server)
        try:
            yield
        finally:
            await durable.stop_runner(app)  # batch lines in flight are aborted and rerun on the next start
            await asyncio.to_thread(close_receipts, app)  # queued receipts are committed before the store closes
            durable.close_store(server)
            if grpc_server is not None:
                from trtserve.serve.grpc.server import stop

                await stop(grpc_server)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await repository.shutdown()
            await asyncio.to_thread(server.tracing.shutdown)  # exports the spans still queued

    app = FastAPI(
        title="trtserve", version=VERSION, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/openapi.json"
    )
    app.state.server = server
    install_handlers(app)
    install_openapi(app)  # documents those handlers' answers
    app.include_router(openai_router)
    app.include_router(embeddings_router)  # /v1/embeddings over tensor models
    app.include_router(pooling_router)  # /v1/rerank, /v2/rerank, /v1/score, /classify over pooling models
    app.include_router(adapters_router)  # /v1/load_lora_adapter, /v1/unload_lora_adapter
    app.include_router(admin_router)  # before kserve's: /v2/repository/... are not model paths
    app.include_router(sleep_router)  # /admin/sleep, /admin/wake_up
    app.include_router(kserve_router)
    app.include_router(batch_router)
    install_responses(app, server)  # /v1/responses over the state store
    receipts = install_receipts(app, server)  # receipt and cache admin routes; with --receipts, a recorder
    versions = VersionServices(repository, config, metrics, features=[receipts.attach])
    repository.on_ready.append(versions.ready)
    repository.on_release.append(versions.released)
    _health_routes(app, server)
    app.add_middleware(IdempotencyMiddleware, server=server)  # inside ServerMiddleware: after auth and limits
    if config.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=config.cors_allow_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(ServerMiddleware, server=server)
    install_anthropic(app)  # /v1/messages, its edge (x-api-key, Anthropic's errors) outside ServerMiddleware
    return app


class VersionServices:
    """The repository's listener: a GenerationService over each LLM version's engine, observed by the
    repository (guards, shadows) and the features, warmed up before the version is routed to.
    Tensor model versions get none."""

    def __init__(
        self,
        repository: Repository,
        config: ServeConfig,
        metrics: Metrics,
        features: list[Callable[[GenerationService], None]],
    ):
        self.repository, self.config, self.metrics, self.features = repository, config, metrics, features
        self.load_watched = False  # serve/load.py's autoscaling gauges follow the first version loaded
        self.startup = StartupClock()  # start-to-ready, once the first LLM version is (serve/telemetry/startup.py)
        metrics.add_collector(self.startup)

    async def ready(self, mv: ModelVersion) -> None:
        engine = mv.engine
        if engine is None:  # a kind that does not generate text (a tensor model: serve/tensors/) gets none
            return
        for ref in engine.adapters():  # the engine dir's and --lora's LoRA adapters: model names win
            lora.check_name(self.repository.models, ref.name, mv.model)
        service = GenerationService(engine, engine.tokenizer, mv.model, self.config, self.metrics, str(mv.version))
        service.observers.append(functools.partial(self.repository.finished, mv))
        for attach in self.features:
            attach(service)
        mv.service = service
        if not self.load_watched:
            self.load_watched = True
            self.metrics.watch_load(LoadTracker(engine.stats, service.admission, engine.info.max_batch_size))
        start = time.perf_counter()
        if self.config.warmup:  # one step of one token: it runs (and loads) the decode path too
            ids = list(engine.tokenizer.encode("Hello"))[:1] or [0]
            warmup = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
            await service.start(ids, warmup, RequestOptions(client_id="warmup"), internal=True).collect()
        self.startup.ready(engine.stats().startup_seconds, mv.open_seconds, time.perf_counter() - start)

    @staticmethod
    def released(mv: ModelVersion) -> None:
        mv.service = None


async def _start_grpc(server: ServerState):
    """Triton's gRPC service on uvicorn's loop (the `grpc` extra is imported only when asked for)."""
    from trtserve.serve.grpc.server import start

    return await start(server)


async def _load(server: ServerState) -> None:
    """The start-up loads; if nothing at all could load, /health says why."""
    repo = server.repository
    await repo.startup()
    failed = [mv for mv in repo.versions() if mv.state == "UNAVAILABLE"]
    if failed and not any(mv.ready for mv in repo.versions()):
        server.load_error = "; ".join(f"{mv.name}: {mv.reason}" for mv in failed)
    else:
        log.info("ready: serving %s", ", ".join(mv.name for mv in repo.versions() if mv.ready) or "nothing yet")


def utilisation(server: ServerState) -> dict:
    """{"utilisation": serve/telemetry/utilisation.py's snapshot} for GET /v2 and /health (none without metrics)."""
    return {"utilisation": server.metrics.utilisation()} if server.metrics is not None else {}


def _health_routes(app: FastAPI, server: ServerState) -> None:
    @app.get("/health", responses=HEALTH)
    async def health(request: Request):
        if "ready" in request.query_params:
            return await health_ready()
        if server.load_error:
            return JSONResponse({"status": "error", "error": server.load_error}, status_code=503)
        if not server.repository.started:
            return JSONResponse({"status": "loading"}, status_code=503)
        alive = server.alive
        body = {"status": "ok" if alive else "dead", **utilisation(server)}
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/health/ready", responses=HEALTH)
    async def health_ready():
        ok = server.is_ready
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    # The Open Inference Protocol's bodies (the KServe SDK reads them); Triton's status codes
    # (its clients read only those): 400 when not live / not ready.
    @app.get("/v2/health/live", responses=V2_LIVE)
    async def live():
        alive = server.alive
        return JSONResponse({"live": alive}, status_code=200 if alive else 400)

    @app.get("/v2/health/ready", responses=V2_READY)
    async def v2_ready():
        ready = server.is_ready
        return JSONResponse({"ready": ready}, status_code=200 if ready else 400)

    @app.get("/metrics")
    async def metrics():
        body = server.metrics.render() if server.metrics is not None else b""
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
