"""One version of a model: its state (Triton's UNKNOWN / READY / UNAVAILABLE / LOADING /
UNLOADING, with a reason), its kind (serve/repository/kinds.py), the model it serves once loaded (an
LLM's engine, a tensor model's TensorModel) and the generation service over it, and its live statistics."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from trtserve.engine.protocol import Engine
from trtserve.serve.repository.kinds import LLM, FrontEnd, ModelKind, Served, Tensors
from trtserve.tensor.types import TensorModel

if TYPE_CHECKING:
    from trtserve.serve.generation import GenerationService

WINDOW = 200  # recent requests kept per version for guards and `repo status`


class State(StrEnum):
    UNKNOWN = "UNKNOWN"  # on disk, never loaded
    READY = "READY"  # routed to
    UNAVAILABLE = "UNAVAILABLE"  # failed to load, or unloaded; `reason` says which
    LOADING = "LOADING"  # engine opening or warming up: never routed to
    UNLOADING = "UNLOADING"  # draining: in-flight requests finish, new ones go elsewhere


@dataclass
class Outcome:
    """One finished request on a version, for guards."""

    ok: bool
    ttft: float | None  # seconds to the first token; None when none came


@dataclass
class ModelVersion:
    model: str
    version: int
    path: Path
    state: State = State.UNKNOWN
    reason: str = ""
    kind: ModelKind = LLM  # what it is, and so how it loads and which front ends serve it
    served_model: Served | None = None  # what its kind opened, while loaded (repository.py sets and clears it)
    config_dir: Path | None = None  # where its kind's config lives (a tensor model's config.pbtxt); None: none
    service: GenerationService | None = None  # over the engine, set by the app's ready listener (serve/app.py)
    kv_bytes: int = 0  # KV budget it holds while loaded
    open_seconds: float = 0.0  # how long opening its engine took (serve/telemetry/startup.py)
    recent: deque[Outcome] = field(default_factory=lambda: deque(maxlen=WINDOW))
    served: int = 0  # requests finished since load
    tensor_in_flight: int = 0  # requests answered without a GenerationService (serve/tensors/serving.py counts them)

    @property
    def name(self) -> str:
        return f"{self.model}:{self.version}"

    @property
    def engine(self) -> Engine | None:
        """The engine of a kind that generates text (None: not loaded, or another kind)."""
        return self.served_model if self.kind.serves(FrontEnd.GENERATE) else None  # type: ignore[return-value]

    @property
    def tensor(self) -> TensorModel | None:
        """The model of a kind served by its config's tensors (None: not loaded, or another kind)."""
        return self.served_model if self.kind.tensors is Tensors.CONFIG else None  # type: ignore[return-value]

    @property
    def ready(self) -> bool:
        return self.state == State.READY and self.served_model is not None and self.served_model.health()

    @property
    def in_flight(self) -> int:
        return self.tensor_in_flight + (0 if self.service is None else self.service.admission.in_flight)

    def record(self, ok: bool, ttft: float | None) -> None:
        self.recent.append(Outcome(ok, ttft))
        self.served += 1

    def index_entry(self) -> dict:
        """Triton's RepositoryIndex entry."""
        return {"name": self.model, "version": str(self.version), "state": self.state.value, "reason": self.reason}
