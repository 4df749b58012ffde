"""The part of Triton's Python backend API (`triton_python_backend_utils`) that pre- and
post-processing steps use, over plain numpy arrays: no stub process, no shared memory.

A model.py written for Triton imports it under its Triton name; trtserve/tensor/python_model.py
makes that import resolve to this module. Names and signatures follow python_backend's
src/resources/triton_python_backend_utils.py and the bindings in src/pb_stub.cc. Business logic
scripting (InferenceRequest.exec), decoupled response senders and auto_complete_config are not
offered: compose models with an ensemble instead.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_log = logging.getLogger("trtserve.tensor.python_model")


class TritonError:
    """An error a response carries (InferenceResponse(error=...)); the codes are
    TRITONSERVER_Error_Code's values, as the backend exposes them."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL):
        self._message, self._code = str(message), int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """Raised by the backend's own calls; a model may raise it from execute to fail the batch."""


class Tensor:
    """A named tensor over a numpy array (BYTES tensors are object arrays of bytes)."""

    def __init__(self, name: str, array: np.ndarray):
        if not isinstance(array, np.ndarray):
            raise TritonModelException(f"Tensor {name!r} needs a numpy array, got {type(array).__name__}")
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class InferenceRequest:
    """One request of the batch handed to TritonPythonModel.execute."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        parameters: dict | str | None = None,
    ):
        self._id, self._correlation_id = request_id, correlation_id
        self._inputs, self._outputs = list(inputs), list(requested_output_names)
        self._model_name, self._model_version = model_name, model_version
        self._flags, self._timeout = flags, timeout
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters or {})

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def model_name(self) -> str:
        return self._model_name

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON string, as Triton gives them."""
        return self._parameters

    def is_cancelled(self) -> bool:
        return False

    def exec(self, *args, **kwargs):
        raise TritonModelException(
            "trtserve runs no business logic scripting (InferenceRequest.exec); chain models with an ensemble"
        )

    async_exec = exec


class InferenceResponse:
    """What execute returns for one request: its output tensors, or an error."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict | str | None = None,
    ):
        self._outputs, self._error = list(output_tensors), error
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters or {})

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class Logger:
    """pb_utils.Logger: the model's messages go to trtserve's log."""

    @staticmethod
    def log_info(message: str) -> None:
        _log.info(message)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning(message)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error(message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug(message)

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        _log.log(level, message)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict, name: str) -> dict | None:
    """The input's entry of the model config (the dict json.loads(args["model_config"]) gives)."""
    return next((t for t in model_config.get("input", ()) if t.get("name") == name), None)


def get_output_config_by_name(model_config: dict, name: str) -> dict | None:
    return next((t for t in model_config.get("output", ()) if t.get("name") == name), None)


def triton_string_to_numpy(triton_type_string: str):
    """ "TYPE_FP32" -> np.float32 (a config's data_type to the numpy type)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | None:
    """BYTES elements in C order, each prefixed by its little-endian uint32 length (None: not BYTES)."""
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts = []
    for item in input_tensor.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts += [struct.pack("<I", len(b)), b]
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes."""
    out, offset = [], 0
    while offset < len(encoded_tensor):
        (n,) = struct.unpack_from("<I", encoded_tensor, offset)
        out.append(bytes(encoded_tensor[offset + 4 : offset + 4 + n]))
        offset += 4 + n
    return np.array(out, dtype=np.object_)
