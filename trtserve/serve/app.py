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

from trtserve.runtime.sampling_params import SamplingParams
from trtserve.serve.config import ServeConfig
from trtserve.serve.errors import install_handlers
from trtserve.serve.generation import GenerationService
from trtserve.serve.kserve.routes import router as kserve_router
from trtserve.serve.kserve.serving import KServeServing
from trtserve.serve.metrics import Metrics
from trtserve.serve.middleware import ServerMiddleware
from trtserve.serve.openai.routes import router as openai_router
from trtserve.serve.openai.serving import OpenAIServing

log = logging.getLogger(__name__)


def default_engine_factory(engine_dir: Path, config: ServeConfig):
    """The engine the manifest's backend asks for: torch, or TensorRT-LLM for tensorrt / trtllm."""
    from trtserve.build.manifest import read_manifest

    if read_manifest(Path(engine_dir)).backend in ("tensorrt", "trtllm"):
        from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

        return lambda: TrtllmEngine(engine_dir, config.engine)
    from trtserve.backends.torch_engine import TorchEngine

    return lambda: TorchEngine(engine_dir, config.engine)


def create_app(engine_dir: Path, config: ServeConfig, engine_factory: Callable | None = None) -> FastAPI:
    """engine_factory() -> an object implementing the Engine interface, plus `.tokenizer`,
    `.shutdown()`; it is called in a worker thread so health checks answer while it loads."""
    model_name = config.model_name or Path(engine_dir).resolve().name
    factory = engine_factory or default_engine_factory(engine_dir, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(_load(app, factory, model_name, config))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            engine = app.state.engine
            if engine is not None:
                await asyncio.to_thread(engine.shutdown)

    app = FastAPI(title="trtserve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.engine = None
    app.state.loaded = app.state.ready = app.state.draining = False
    app.state.load_error = None
    app.state.metrics = None
    install_handlers(app)
    app.include_router(openai_router)
    app.include_router(kserve_router)
    _health_routes(app)
    if config.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=config.cors_allow_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(ServerMiddleware, state=app.state)
    return app


async def _load(app: FastAPI, factory: Callable, model_name: str, config: ServeConfig) -> None:
    try:
        log.info("loading engine for model %r", model_name)
        engine = await asyncio.to_thread(factory)
        app.state.engine = engine
        metrics = Metrics(model_name, engine.stats)
        service = GenerationService(engine, engine.tokenizer, model_name, config, metrics)
        app.state.metrics = metrics
        app.state.service = service
        app.state.openai = OpenAIServing(service)
        app.state.kserve = KServeServing(service, platform=getattr(engine, "platform", "trtserve_torch"))
        app.state.loaded = True
        if config.warmup:
            log.info("warming up")
            ids = list(engine.tokenizer.encode("Hello")) or [0]
            run = service.start("warmup", ids, SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))
            await run.collect()
        app.state.ready = True
        log.info("ready: serving %r", model_name)
    except Exception as err:  # the server stays up, unready, and says why
        app.state.load_error = f"{type(err).__name__}: {err}"
        log.exception("loading the engine failed")


def _health_routes(app: FastAPI) -> None:
    def alive(request: Request) -> bool:
        engine = request.app.state.engine
        return engine is not None and engine.health()

    def ready(request: Request) -> bool:
        s = request.app.state
        return s.ready and not s.draining and alive(request)

    @app.get("/health")
    async def health(request: Request):
        if "ready" in request.query_params:
            return await health_ready(request)
        s = request.app.state
        if s.load_error:
            return JSONResponse({"status": "error", "error": s.load_error}, status_code=503)
        if s.engine is None:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse(
            {"status": "ok"} if alive(request) else {"status": "dead"}, status_code=200 if alive(request) else 503
        )

    @app.get("/health/ready")
    async def health_ready(request: Request):
        ok = ready(request)
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/v2/health/live")
    async def live(request: Request):
        return Response(status_code=200 if alive(request) else 400)

    @app.get("/v2/health/ready")
    async def v2_ready(request: Request):
        return Response(status_code=200 if ready(request) else 400)

    @app.get("/metrics")
    async def metrics(request: Request):
        m = request.app.state.metrics
        body = m.render() if m is not None else b""
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
