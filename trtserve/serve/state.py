"""The server's lifecycle, one typed object (on `app.state.server`) instead of loose flags.

loading -> loaded (engine up, routes answer) -> ready (warm-up ran) ; draining after SIGTERM
failed: loading raised; the server stays up, unready, and says why
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtserve.engine.protocol import Engine
from trtserve.serve.config import ServeConfig

if TYPE_CHECKING:  # the serving objects import this module's users; only their types are needed here
    from trtserve.serve.generation import GenerationService
    from trtserve.serve.kserve.serving import KServeServing
    from trtserve.serve.metrics import Metrics
    from trtserve.serve.openai.serving import OpenAIServing


@dataclass
class ServerState:
    config: ServeConfig
    model_name: str
    engine: Engine | None = None  # set once loaded
    service: GenerationService | None = None
    openai: OpenAIServing | None = None
    kserve: KServeServing | None = None
    metrics: Metrics | None = None
    ready: bool = False  # the warm-up request finished
    draining: bool = False  # SIGTERM seen: readiness false, new requests 503
    load_error: str | None = None  # why loading failed, for /health

    @property
    def loaded(self) -> bool:
        return self.service is not None

    @property
    def alive(self) -> bool:
        return self.engine is not None and self.engine.health()

    @property
    def is_ready(self) -> bool:
        return self.ready and not self.draining and self.alive

    @property
    def in_flight(self) -> int:
        return 0 if self.service is None else self.service.admission.in_flight
