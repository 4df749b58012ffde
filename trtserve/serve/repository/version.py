"""One version of a model: its state (Triton's UNKNOWN / READY / UNAVAILABLE / LOADING /
UNLOADING, with a reason), its engine and the generation service over it, and its live statistics."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from trtserve.engine.protocol import Engine
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
    engine: Engine | None = None  # an LLM version's engine
    tensor: TensorModel | None = None  # a tensor model's (trtserve/tensor/): ONNX, Python step or ensemble
    config_dir: Path | None = None  # a tensor model's: the dir of its config.pbtxt and labels; None: an LLM
    service: GenerationService | None = None  # over the engine, set by the app's ready listener (serve/app.py)
    kv_bytes: int = 0  # KV budget it holds while loaded
    open_seconds: float = 0.0  # how long opening its engine took (serve/startup.py)
    recent: deque[Outcome] = field(default_factory=lambda: deque(maxlen=WINDOW))
    served: int = 0  # requests finished since load
    tensor_in_flight: int = 0  # a tensor model's requests being answered (serve/tensors/serving.py counts them)

    @property
    def name(self) -> str:
        return f"{self.model}:{self.version}"

    @property
    def is_tensor(self) -> bool:
        return self.config_dir is not None

    @property
    def ready(self) -> bool:
        if self.state != State.READY:
            return False
        if self.tensor is not None:
            return self.tensor.health()
        return self.engine is not None and self.engine.health()

    @property
    def in_flight(self) -> int:
        if self.is_tensor:
            return self.tensor_in_flight
        return 0 if self.service is None else self.service.admission.in_flight

    def record(self, ok: bool, ttft: float | None) -> None:
        self.recent.append(Outcome(ok, ttft))
        self.served += 1

    def index_entry(self) -> dict:
        """Triton's RepositoryIndex entry."""
        return {"name": self.model, "version": str(self.version), "state": self.state.value, "reason": self.reason}
