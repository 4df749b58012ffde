"""The tensor-model contract: a model's configuration (Triton's ModelConfig, read once into typed
values), one inference request, the errors a request can meet, and the TensorModel interface that
serve/ drives. Built by trtserve/tensor/config.py; implemented by the batched models (ONNX Runtime,
Python steps) and ensembles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from trtserve.tensor.stats import ModelStatistics

# KServe datatype -> (numpy dtype, ModelConfig DataType name). BYTES travel as object arrays of bytes.
DATATYPES: dict[str, tuple[Any, str]] = {
    "BOOL": (np.bool_, "TYPE_BOOL"),
    "UINT8": (np.uint8, "TYPE_UINT8"),
    "UINT16": (np.uint16, "TYPE_UINT16"),
    "UINT32": (np.uint32, "TYPE_UINT32"),
    "UINT64": (np.uint64, "TYPE_UINT64"),
    "INT8": (np.int8, "TYPE_INT8"),
    "INT16": (np.int16, "TYPE_INT16"),
    "INT32": (np.int32, "TYPE_INT32"),
    "INT64": (np.int64, "TYPE_INT64"),
    "FP16": (np.float16, "TYPE_FP16"),
    "FP32": (np.float32, "TYPE_FP32"),
    "FP64": (np.float64, "TYPE_FP64"),
    "BYTES": (np.object_, "TYPE_STRING"),
}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model."""

    name: str
    datatype: str  # a DATATYPES key ("FP32", "BYTES", ...)
    dims: tuple[int, ...]  # without the batch dim when the model batches; -1: any size
    optional: bool = False  # inputs only: the request may leave it out
    labels: tuple[str, ...] | None = None  # outputs only: label_filename's lines (classification)


@dataclass(frozen=True)
class QueuePolicy:
    """ModelQueuePolicy: what a queue (one per priority level) admits and how long a request may wait."""

    timeout_action: Literal["REJECT", "DELAY"] = "REJECT"
    default_timeout_us: int = 0  # 0: requests wait as long as it takes
    allow_timeout_override: bool = False  # a request's own timeout may shorten the default
    max_queue_size: int = 0  # 0: unbounded; else a full queue refuses at once


@dataclass(frozen=True)
class DynamicBatching:
    """ModelDynamicBatching with Triton's defaults."""

    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0  # 0: one level; else levels 1 (highest) .. priority_levels
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = field(default_factory=QueuePolicy)
    priority_queue_policy: dict[int, QueuePolicy] = field(default_factory=dict)  # level -> its policy

    def policy(self, level: int) -> QueuePolicy:
        return self.priority_queue_policy.get(level, self.default_queue_policy)


@dataclass(frozen=True)
class EnsembleStep:
    model_name: str
    model_version: int  # -1: the version the repository routes to
    input_map: dict[str, str]  # the step model's input name -> the ensemble tensor it reads
    output_map: dict[str, str]  # the step model's output name -> the ensemble tensor it writes


ModelKind = Literal["onnx", "python", "ensemble"]


@dataclass(frozen=True)
class TensorModelConfig:
    """A validated config.pbtxt. `raw` is the ModelConfig message as JSON (GET .../config answers it)."""

    name: str
    kind: ModelKind  # trtserve/tensor/kinds.py's table, from platform / backend
    platform: str  # as Triton's metadata names it: "onnxruntime_onnx", "ensemble", "python"
    max_batch_size: int  # 0: the model does not batch (dims are the full shape)
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dynamic_batching: DynamicBatching | None = None  # None: each request runs alone
    instance_count: int = 1  # instance_group count: sessions, threads split between them
    ensemble: tuple[EnsembleStep, ...] = ()
    parameters: dict[str, str] = field(default_factory=dict)  # ModelConfig.parameters' string values
    default_model_filename: str = ""  # "" : the kind's default ("model.onnx", "model.py")
    raw: dict = field(default_factory=dict)

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((t for t in self.outputs if t.name == name), None)


@dataclass
class InferRequest:
    inputs: dict[str, np.ndarray]  # by input name; leading batch dim when max_batch_size > 0
    outputs: tuple[str, ...] | None = None  # output names asked for; None: every output
    priority: int = 0  # Triton's level: 1 is the highest; 0 the model's default_priority_level
    timeout_us: int | None = None  # the request's own queue timeout (honoured if allow_timeout_override)
    id: str = ""  # the client's request id, for logs


class TensorError(Exception):
    """A request-level failure; `status` is its HTTP status, `code` its gRPC status name."""

    status = 500
    code = "INTERNAL"


class InvalidInput(TensorError):
    status, code = 400, "INVALID_ARGUMENT"


class QueueFull(TensorError):
    """max_queue_size reached: refused at once."""

    status, code = 429, "RESOURCE_EXHAUSTED"


class QueueTimeout(TensorError):
    """Waited past its queue timeout with timeout_action REJECT (Triton: "Request timeout expired")."""

    status, code = 503, "UNAVAILABLE"


class ModelNotReady(TensorError):
    """An ensemble's composing model has no ready version."""

    status, code = 503, "UNAVAILABLE"


class ModelExecutionError(TensorError):
    """The model itself failed a request (a Python step's error, an ONNX Runtime failure)."""

    status, code = 500, "INTERNAL"


class TensorModel(Protocol):
    """What serve/ drives. `infer` is called on the server's event loop; models run their work in
    their own threads (one per instance) so the loop never blocks."""

    config: TensorModelConfig
    stats: ModelStatistics

    async def infer(self, request: InferRequest) -> dict[str, np.ndarray]:
        """The outputs asked for (all when request.outputs is None), each with the request's batch
        dim; raises TensorError (InvalidInput, QueueFull, QueueTimeout, ...)."""
        ...

    def health(self) -> bool: ...

    def shutdown(self) -> None:
        """Fail what is queued (ModelNotReady), finish nothing new, release sessions and threads."""
        ...


# (model name, version or -1) -> the READY model that answers it; raises TensorError when none.
# The repository supplies it, so an ensemble's steps go through their own models' batchers.
Resolver = Callable[[str, int], TensorModel]
