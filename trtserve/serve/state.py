"""The server's lifecycle, one typed object (on `app.state.server`) instead of loose flags.

The repository (serve/repository/) holds every model version and its engine; an engine dir is a
repository of one. `engine` and `service` are the default model's default version's, for code
that serves one model. Draining after SIGTERM: readiness false, new requests 503.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtserve.engine.protocol import Engine
from trtserve.serve.config import ServeConfig
from trtserve.serve.telemetry.tracing import NO_TRACING, Tracing

if TYPE_CHECKING:
    from trtserve.serve.generation import GenerationService
    from trtserve.serve.repository.repository import Repository
    from trtserve.serve.repository.version import ModelVersion
    from trtserve.serve.telemetry.metrics import Metrics
    from trtserve.state import StateStore


@dataclass
class ServerState:
    config: ServeConfig
    model_name: str  # the default model (an engine dir's, or the repository's first)
    repository: Repository | None = None  # set by create_app
    metrics: Metrics | None = None
    draining: bool = False  # SIGTERM seen: readiness false, new requests 503
    asleep: bool = False  # POST /admin/sleep (serve/sleep.py): readiness false, requests 503 until /admin/wake_up
    stalled: bool = False  # serve/watchdog.py: an engine made no progress while work waited
    load_error: str | None = None  # why loading failed when no version at all could load, for /health
    store: StateStore | None = None  # the durable state store (trtserve/state); None with --state-dir none
    tracing: Tracing = NO_TRACING  # OpenTelemetry traces (serve/telemetry/tracing.py); off unless an endpoint is set

    @property
    def default_version(self) -> ModelVersion | None:
        repo = self.repository
        return None if repo is None else repo.models[repo.default_name].default_version()

    @property
    def engine(self) -> Engine | None:
        mv = self.default_version
        return None if mv is None else mv.engine

    @property
    def service(self) -> GenerationService | None:
        mv = self.default_version
        return None if mv is None else mv.service

    @property
    def loaded(self) -> bool:
        """Routes answer (each model says 503 with Retry-After while none of its versions is ready)."""
        return self.repository is not None

    @property
    def ready(self) -> bool:
        return self.repository is not None and self.repository.is_ready()

    @property
    def alive(self) -> bool:
        return self.repository is not None and self.repository.alive()

    @property
    def is_ready(self) -> bool:
        """Readiness (/health/ready, /v2/health/ready, gRPC ServerReady): False, too, when nothing at all
        could load at start-up (until a version loads), so a probe does not send traffic to a server
        that can only refuse it."""
        if not self.ready or self.draining or self.asleep or self.stalled or not self.alive:
            return False
        return self.load_error is None or any(mv.ready for mv in self.repository.versions())

    @property
    def in_flight(self) -> int:
        repo = self.repository
        return 0 if repo is None else sum(mv.in_flight for mv in repo.versions())
