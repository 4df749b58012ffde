"""The FastAPI app: loads the engine in the background, warms it up, then reports ready."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from trtserve.engine.open import open_engine
from trtserve.engine.protocol import Engine
from trtserve.engine.sampling import SamplingParams
from trtserve.serve.config import ServeConfig
from trtserve.serve.errors import install_handlers
from trtserve.serve.generation import GenerationService
from trtserve.serve.kserve.routes import router as kserve_router
from trtserve.serve.kserve.serving import KServeServing
from trtserve.serve.metrics import Metrics
from trtserve.serve.middleware import ServerMiddleware
from trtserve.serve.openai.routes import router as openai_router
from trtserve.serve.openai.serving import OpenAIServing
from trtserve.serve.state import ServerState

log = logging.getLogger(__name__)


def default_engine_factory(engine_dir: Path, config: ServeConfig) -> Callable[[], Engine]:
    """The engine the manifest's backend names (engine/backends.py), loaded when called."""
    return lambda: open_engine(engine_dir, config.engine)


def create_app(engine_dir: Path, config: ServeConfig, engine_factory: Callable[[], Engine] | None = None) -> FastAPI:
    """engine_factory() -> an Engine (trtserve/engine/protocol.py); it is called in a worker
    thread so health checks answer while it loads."""
    server = ServerState(config, config.model_name or Path(engine_dir).resolve().name)
    factory = engine_factory or default_engine_factory(engine_dir, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        grpc_server = await _start_grpc(server) if config.grpc_port is not None else None
        task = asyncio.create_task(_load(server, factory))
        try:
            yield
        finally:
            if grpc_server is not None:
                from trtserve.serve.grpc.server import stop

                await stop(grpc_server)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if server.engine is not None:
                await asyncio.to_thread(server.engine.shutdown)

    app = FastAPI(title="trtserve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server
    install_handlers(app)
    app.include_router(openai_router)
    app.include_router(kserve_router)
    _health_routes(app, server)
    if config.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=config.cors_allow_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(ServerMiddleware, server=server)
    return app


async def _start_grpc(server: ServerState):
    """Triton's gRPC service on uvicorn's loop (the `grpc` extra is imported only when asked for)."""
    from trtserve.serve.grpc.server import start

    return await start(server)


async def _load(server: ServerState, factory: Callable[[], Engine]) -> None:
    name, config = server.model_name, server.config
    try:
        log.info("loading engine for model %r", name)
        engine = await asyncio.to_thread(factory)
        server.engine = engine
        metrics = Metrics(name, engine.stats)
        service = GenerationService(engine, engine.tokenizer, name, config, metrics)
        server.metrics = metrics
        server.openai = OpenAIServing(service)
        server.kserve = KServeServing(service, platform=engine.platform)
        server.service = service  # loaded: requests are routed from here on
        if config.warmup:
            log.info("warming up")
            ids = list(engine.tokenizer.encode("Hello")) or [0]
            run = service.start("warmup", ids, SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))
            await run.collect()
        server.ready = True
        log.info("ready: serving %r", name)
    except Exception as err:  # the server stays up, unready, and says why
        server.load_error = f"{type(err).__name__}: {err}"
        log.exception("loading the engine failed")


def _health_routes(app: FastAPI, server: ServerState) -> None:
    @app.get("/health")
    async def health(request: Request):
        if "ready" in request.query_params:
            return await health_ready()
        if server.load_error:
            return JSONResponse({"status": "error", "error": server.load_error}, status_code=503)
        if server.engine is None:
            return JSONResponse({"status": "loading"}, status_code=503)
        alive = server.alive
        return JSONResponse({"status": "ok" if alive else "dead"}, status_code=200 if alive else 503)

    @app.get("/health/ready")
    async def health_ready():
        ok = server.is_ready
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/v2/health/live")
    async def live():
        return Response(status_code=200 if server.alive else 400)

    @app.get("/v2/health/ready")
    async def v2_ready():
        return Response(status_code=200 if server.is_ready else 400)

    @app.get("/metrics")
    async def metrics():
        body = server.metrics.render() if server.metrics is not None else b""
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
