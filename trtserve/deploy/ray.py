"""`trtserve run --ray`: our FastAPI app as a Ray Serve deployment, one engine per replica.

    Ray HTTP proxy -> [PrefixFrontend] -> TrtserveReplica x N (each: create_app + its own engine)

TrtserveReplica is `@serve.deployment` + `@serve.ingress`: the same routes, auth, limits and metrics as
`trtserve run`. Its `max_ongoing_requests` and autoscaling target come from the engine's batch size
(settings.py); its health check is our liveness, and it only joins the pool once our readiness is true
(the engine loaded and warmed up). With prefix affinity on, a thin frontend deployment reads each
request's prompt, keys it by its first KV block (affinity.py) and forwards it to a replica chosen by
router.PrefixAffinityRouter; the Ray proxy cannot do this itself because it routes before it has
read the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from pathlib import Path

from fastapi import FastAPI
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from trtserve.deploy.affinity import prefix_key, prompt_tokens
from trtserve.deploy.forward import HTTPCall, ResponseStart, call_asgi
from trtserve.deploy.router import PrefixAffinityRouter
from trtserve.deploy.settings import RaySettings
from trtserve.engine.errors import UserError
from trtserve.engine.layout import TOKENIZER_DIR, read_engine_config
from trtserve.serve.app import create_app
from trtserve.serve.config import ServeConfig
from trtserve.serve.load import LoadTracker
from trtserve.serve.state import ServerState
from trtserve.serve.telemetry.tracing import TRACE_HEADERS, open_tracing, operation_of

log = logging.getLogger(__name__)
APP_NAME = "trtserve"
REPLICA = "TrtserveReplica"
FRONTEND = "PrefixFrontend"


def _ready_first(app: FastAPI) -> None:
    """Make the app's startup wait for readiness, so Ray only routes to a warmed-up replica; a failed
    load fails the replica's start (Ray then retries it) instead of serving 503s."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: FastAPI):
        async with inner(a) as state:
            server: ServerState = a.state.server
            while not server.is_ready:
                if server.load_error:
                    raise RuntimeError(f"the engine failed to load: {server.load_error}")
                await asyncio.sleep(0.1)
            yield state

    app.router.lifespan_context = lifespan


@serve.deployment(name=REPLICA)
@serve.ingress()
class TrtserveReplica:
    def __init__(self, engine_dir: str, config: dict):
        self.engine_dir, self.config = Path(engine_dir), ServeConfig.model_validate(config)
        self.load: LoadTracker | None = None

    def __serve_build_asgi_app__(self) -> FastAPI:
        self.web = create_app(self.engine_dir, self.config)
        _ready_first(self.web)
        return self.web

    @property
    def server(self) -> ServerState:
        return self.web.state.server

    def check_health(self) -> None:
        """Ray's liveness probe: raising restarts the replica (the engine loop died)."""
        s = self.server
        if s.load_error or (s.engine is not None and not s.alive):
            raise RuntimeError(f"trtserve replica unhealthy: {s.load_error or 'the engine stopped'}")

    def record_routing_stats(self) -> dict:
        """Ray's routing stats: our `trtserve_load` (serve/load.py), for routers and dashboards."""
        s = self.server
        if s.service is None:
            return {}
        if self.load is None:
            self.load = LoadTracker(s.engine.stats, s.service.admission, s.engine.info.max_batch_size)
        return {"load": self.load.signals().load}

    async def forward(self, call: HTTPCall):
        """A request from the prefix frontend, through our app in-process; streams ResponseStart, bytes."""
        async for part in call_asgi(self.web, call):
            yield part


@serve.deployment(name=FRONTEND, ray_actor_options={"num_cpus": 0})
class PrefixFrontend:
    """Reads the prompt, keys it by its first KV block, forwards to the replica the router picks.
    A plain HTTP deployment (`__call__`), not a second ingress: Ray allows one FastAPI ingress per app.
    Traced like the replicas (their run config's endpoint): its SERVER span continues the caller's
    traceparent and is the parent the replica's span continues."""

    def __init__(self, replicas: DeploymentHandle, engine_dir: str, block_size: int, config: dict):
        from trtserve.engine.rules import load_tokenizer

        self.replicas = replicas.options(method_name="forward", stream=True)
        self.tokenizer, _ = load_tokenizer(Path(engine_dir) / TOKENIZER_DIR)
        self.block_size = block_size
        self.tracing = open_tracing(ServeConfig.model_validate(config))

    def __del__(self):
        self.tracing.shutdown()  # Ray Serve's teardown: export the spans still queued

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        span = self.tracing.server_span(
            f"{request.method} {path}",
            {k: request.headers[k] for k in TRACE_HEADERS if k in request.headers},
            {"http.request.method": request.method, "url.path": path, "trtserve.ray.deployment": FRONTEND},
            operation_of(path),
        )
        try:
            body = await request.body()
            ids = prompt_tokens(path, body, self.tokenizer)
            key = prefix_key(ids, self.block_size) if ids else None
            call = HTTPCall(
                request.method, path, request.url.query.encode(), span.propagate(request.headers.raw), body, key
            )
            stream = self.replicas.remote(call)
            start = await stream.__anext__()
        except BaseException:
            span.end(500, False)
            raise
        assert isinstance(start, ResponseStart)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in start.headers if k.lower() != b"content-length"}

        async def rest():
            finished = False
            try:
                async for chunk in stream:
                    yield chunk
                finished = True
            finally:
                if not finished:  # the client went away: cancel the replica's call (aborts the engine request)
                    stream.cancel()
                span.end(start.status, finished and start.status < 500)

        return StreamingResponse(rest(), status_code=start.status, headers=headers)


def build_app(engine_dir: Path, config: ServeConfig, settings: RaySettings):
    """The Ray Serve application (not yet running): replicas, and the frontend when affinity is on."""
    engine_dir = Path(engine_dir).resolve()
    # the deployment's options are set before any replica has opened its engine: from the engine dir
    batch = read_engine_config(engine_dir).build_config.batch_limit(config.engine.max_batch_size)
    # replicas on one node would share the default state dir (one SQLite store, batch jobs run twice): off
    # unless the user named one
    update = {"grpc_port": None, "warmup": True, "state_dir": config.state_dir or "none"}
    replica_config = config.model_copy(update=update).model_dump(mode="json")
    opts = settings.deployment_options(batch, config.drain_timeout)
    if settings.prefix_affinity:
        opts["request_router_config"] = RequestRouterConfig(request_router_class=PrefixAffinityRouter)
    replicas = TrtserveReplica.options(**opts).bind(str(engine_dir), replica_config)
    if not settings.prefix_affinity:
        return replicas
    block = read_engine_config(engine_dir).build_config.plugin_config.tokens_per_block
    return PrefixFrontend.bind(replicas, str(engine_dir), block, replica_config)


def check(engine_dir: Path, config: ServeConfig) -> None:
    if config.grpc_port is not None:
        raise UserError("--grpc-port is not served under --ray (Ray's proxy speaks HTTP here); drop one of them")
    from trtserve.serve.repository.scan import is_engine_dir

    if not is_engine_dir(Path(engine_dir)):
        raise UserError(
            f"{engine_dir} is not an engine dir; --ray serves one engine per replica (a model repository "
            "is served by plain `trtserve run`)"
        )


def run(engine_dir: Path, config: ServeConfig, settings: RaySettings) -> None:
    """Start (or join RAY_ADDRESS's) Ray, deploy, and serve on config.host:port until SIGINT/SIGTERM,
    then delete the app: replicas drain within graceful_shutdown_timeout_s (= drain_timeout)."""
    import ray

    check(engine_dir, config)
    ray.init(address=settings.address or "local")  # "local": a new Ray here, never one found by chance
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which installs handlers of its own
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": config.host, "port": config.port})
        serve.run(build_app(engine_dir, config, settings), name=APP_NAME, route_prefix="/")
        log.info("serving on http://%s:%d through Ray Serve", config.host, config.port)
        stop.wait()
        serve.delete(APP_NAME)
    finally:
        if settings.address is None:
            serve.shutdown()  # our local Ray: take Serve down with us; a cluster's Serve stays
        ray.shutdown()
