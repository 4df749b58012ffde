"""One infer request to a tensor model, shared by KServe REST and gRPC: decoded input tensors,
request parameters and the outputs asked for in; output arrays out, classification applied.

Triton's request parameters here: `priority` (level, 1 the highest, 0 the model's default) and
`timeout` (µs in the queue; honoured when the model's queue policy allows the override);
sequence batching's are refused; transport ones (binary_data_output, headers, triton_*) and any
others are ignored, as Triton passes them to backends that do not read them. An output's own
parameters: `classification` (k: the top-k "value:index[:label]" strings in place of the tensor)
and `binary_data` (read by the REST transport).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trtserve.serve.errors import APIError
from trtserve.tensor.classification import classify
from trtserve.tensor.config import metadata
from trtserve.tensor.types import DATATYPES, InferRequest, TensorError

if TYPE_CHECKING:
    from trtserve.serve.repository.version import ModelVersion

SEQUENCE = ("sequence_id", "sequence_start", "sequence_end")
_NAMES = {np.dtype(t): name for name, (t, _) in DATATYPES.items()}  # an array's dtype -> its KServe datatype


def datatype_of(arr: np.ndarray) -> str:
    """The KServe datatype an output array travels as (object, bytes and str arrays: BYTES)."""
    name = "BYTES" if arr.dtype.kind in "OSU" else _NAMES.get(arr.dtype)
    if name is None:
        raise APIError(500, f"an output has dtype {arr.dtype}, which KServe cannot carry; this is a bug in the model")
    return name


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    classification: int = 0  # k > 0: the top-k classes as BYTES strings instead of the tensor


def _level(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, float) and value.is_integer():  # JSON's 3.0 is the integer 3
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a priority level (1 is the highest, 0 the default)" if key == "priority" else "a positive integer"
        raise APIError(400, f"parameter {key!r} is {value!r}; give {what}")
    return value


class TensorServing:
    """The serving logic of one READY tensor model version."""

    def __init__(self, mv: ModelVersion):
        assert mv.tensor is not None
        self.mv, self.model = mv, mv.tensor
        self.config = mv.tensor.config
        self.name, self.version = mv.model, str(mv.version)

    @classmethod
    def of(cls, mv: ModelVersion) -> TensorServing:
        """The version's serving logic; 503 if it was unloaded between routing and now."""
        if mv.tensor is None:
            raise APIError(503, f"model {mv.name} is {mv.state.value}; retry later", headers={"Retry-After": "2"})
        return cls(mv)

    def model_metadata(self, versions: list[str]) -> dict:
        return metadata(self.config, versions)

    def model_config(self) -> dict:
        return self.config.raw

    def outputs(self, asked: list[tuple[str, dict[str, Any]]] | None) -> list[RequestedOutput]:
        """The outputs to return, in request order (None: every output, in the config's order)."""
        if not asked:
            return [RequestedOutput(t.name) for t in self.config.outputs]
        out, seen = [], set()
        for name, params in asked:
            spec = self.config.output(name)
            if spec is None:
                have = ", ".join(t.name for t in self.config.outputs)
                raise APIError(400, f"unknown output {name!r}; model {self.name!r} has {have}")
            if name in seen:
                raise APIError(400, f"output {name!r} is asked for twice")
            seen.add(name)
            k = params.get("classification", 0)
            out.append(RequestedOutput(name, _level("classification", k, 1) if k else 0))
        return out

    def request(
        self, tensors: dict[str, np.ndarray], parameters: dict[str, Any], outputs: list[RequestedOutput], rid: str
    ) -> InferRequest:
        priority, timeout = 0, None
        for key, value in parameters.items():
            if key in SEQUENCE:
                raise APIError(
                    400, f"parameter {key!r}: sequence batching is not supported; send each request without a sequence"
                )
            if key == "priority":
                priority = _level(key, value, 0)
            elif key == "timeout":
                timeout = _level(key, value, 1)
        names = tuple(o.name for o in outputs)
        return InferRequest(dict(tensors), names, priority=priority, timeout_us=timeout, id=rid)

    async def infer(
        self,
        tensors: dict[str, np.ndarray],
        parameters: dict[str, Any],
        asked: list[tuple[str, dict[str, Any]]] | None,
        rid: str = "",
    ) -> dict[str, np.ndarray]:
        """The outputs asked for (output name -> array), in request order; APIError with the model's
        status (400 bad input, 429 queue full, 503 queue timeout or not ready, 500 model failure)."""
        outputs = self.outputs(asked)
        request = self.request(tensors, parameters, outputs, rid)
        ok = False
        self.mv.tensor_in_flight += 1
        try:
            arrays = await self.model.infer(request)
            ok = True
        except TensorError as err:
            raise APIError(err.status, str(err)) from None
        finally:
            self.mv.tensor_in_flight -= 1
            self.mv.record(ok, None)
        try:
            return {o.name: self._classified(o, arrays[o.name]) for o in outputs}
        except TensorError as err:
            raise APIError(err.status, str(err)) from None

    def _classified(self, out: RequestedOutput, arr: np.ndarray) -> np.ndarray:
        if not out.classification:
            return arr
        labels = self.config.output(out.name).labels
        return classify(arr, out.classification, labels, batched=self.config.max_batch_size > 0)
