"""Triton's gRPC messages <-> numpy: input tensors (typed `contents` or `raw_input_contents`), request
parameters, and responses (outputs always in `raw_output_contents`, BYTES as 4-byte little-endian
length + bytes, as Triton sends them), for LLMs and tensor models alike."""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from trtserve.serve.errors import APIError
from trtserve.serve.kserve.protocol import DTYPES, InferInput, decode_tensor, encode_bytes
from trtserve.serve.tensors.serving import TensorServing, datatype_of

# datatype -> the InferTensorContents field its values travel in (FP16 has none: raw only)
CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parameters(params) -> dict[str, Any]:
    """A protobuf map of InferParameter -> {key: bool | int | str | float}; unset values are skipped."""
    out = {}
    for key, p in params.items():
        which = p.WhichOneof("parameter_choice")
        if which is not None:
            out[key] = getattr(p, which)
    return out


def _contents(t: pb.ModelInferRequest.InferInputTensor) -> list:
    field = CONTENTS.get(t.datatype)
    if field is None:
        raise APIError(
            400, f"input {t.name!r} is {t.datatype}, which has no typed contents; send it in raw_input_contents"
        )
    for other in set(CONTENTS.values()) - {field}:
        if len(getattr(t.contents, other)):
            raise APIError(400, f"input {t.name!r} is {t.datatype} but its values are in contents.{other}; use {field}")
    values = list(getattr(t.contents, field))
    if not values and int(np.prod(t.shape)) > 0:
        raise APIError(400, f"input {t.name!r} has no data; send it in raw_input_contents or contents.{field}")
    return values


def request_tensors(req: pb.ModelInferRequest) -> dict[str, np.ndarray]:
    """Every input as an array of its declared shape. Raw contents are one entry per input, in input
    order, and then no input may carry typed contents (Triton's rule)."""
    raw = list(req.raw_input_contents)
    if raw and len(raw) != len(req.inputs):
        raise APIError(
            400, f"the request has {len(req.inputs)} inputs but {len(raw)} raw_input_contents; send one per input"
        )
    tensors: dict[str, np.ndarray] = {}
    for i, t in enumerate(req.inputs):
        if t.name in tensors:
            raise APIError(400, f"input {t.name!r} is given twice")
        if t.datatype not in DTYPES:
            raise APIError(400, f"input {t.name!r} has datatype {t.datatype!r}; use one of {', '.join(DTYPES)}")
        spec = InferInput(name=t.name, shape=list(t.shape), datatype=t.datatype)
        if raw:
            if t.HasField("contents"):
                raise APIError(400, f"input {t.name!r} has contents, but the request uses raw_input_contents; use one")
            tensors[t.name] = decode_tensor(spec, raw[i])
        else:
            spec.data = _contents(t)
            tensors[t.name] = decode_tensor(spec, None)
    return tensors


def _raw(arr: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return encode_bytes([v if isinstance(v, bytes) else str(v).encode() for v in arr.reshape(-1)])
    return np.ascontiguousarray(arr, dtype=np.dtype(DTYPES[datatype]).newbyteorder("<")).tobytes()


def infer_response(model: str, version: str, rid: str, arrays: dict[str, np.ndarray]) -> pb.ModelInferResponse:
    """A response carrying `arrays` (output name -> array) in request order, each as the datatype
    its dtype names (object arrays: BYTES)."""
    resp = pb.ModelInferResponse(model_name=model, model_version=version, id=rid)
    for name, arr in arrays.items():
        datatype = datatype_of(arr)
        resp.outputs.add(name=name, datatype=datatype, shape=list(arr.shape))
        resp.raw_output_contents.append(_raw(arr, datatype))
    return resp


async def infer_tensor(serving: TensorServing, req: pb.ModelInferRequest) -> dict[str, np.ndarray]:
    """A tensor model's ModelInfer: its outputs (classification per output's `classification` parameter)."""
    asked = [(o.name, parameters(o.parameters)) for o in req.outputs] or None
    return await serving.infer(request_tensors(req), parameters(req.parameters), asked, req.id)
