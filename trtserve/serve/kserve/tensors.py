"""KServe v2 REST infer for tensor models: the body (JSON or the binary tensor extension) decoded
by protocol.py, answered by serve/tensors/serving.py, and the outputs written back as JSON `data`
or as binary tensors after the JSON header: per output by its `binary_data` parameter, else by the
request's `binary_data_output` (tritonclient.http asks for binary outputs by default)."""

from __future__ import annotations

import json

import numpy as np
from fastapi.responses import JSONResponse, Response

from trtserve.serve.errors import APIError
from trtserve.serve.kserve.protocol import DTYPES, HEADER, encode_bytes, parse_infer
from trtserve.serve.tensors.serving import TensorServing, datatype_of


def _json_data(name: str, arr: np.ndarray, datatype: str) -> list:
    flat = arr.reshape(-1)
    if datatype != "BYTES":
        return flat.tolist()
    try:
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in flat]
    except UnicodeDecodeError:
        raise APIError(
            400, f"output {name!r} holds bytes that are not UTF-8, which JSON cannot carry; ask for it with binary_data"
        ) from None


def _raw(arr: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return encode_bytes([v if isinstance(v, bytes) else str(v).encode() for v in arr.reshape(-1)])
    return np.ascontiguousarray(arr, dtype=np.dtype(DTYPES[datatype]).newbyteorder("<")).tobytes()


async def infer(serving: TensorServing, body: bytes, header_length: str | None) -> Response:
    req, tensors = parse_infer(body, header_length)
    params = req.parameters or {}
    asked = [(o.name, o.parameters or {}) for o in req.outputs] if req.outputs else None
    arrays = await serving.infer(tensors, params, asked, req.id or "")
    binary_default = bool(params.get("binary_data_output", False))
    per_output = {o.name: (o.parameters or {}).get("binary_data") for o in req.outputs or []}
    head: dict = {"model_name": serving.name, "model_version": serving.version, "outputs": []}
    if req.id is not None:
        head["id"] = req.id
    blobs = []
    for name, arr in arrays.items():
        datatype = datatype_of(arr)
        entry: dict = {"name": name, "datatype": datatype, "shape": list(arr.shape)}
        binary = per_output.get(name)
        if binary if binary is not None else binary_default:
            raw = _raw(arr, datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = _json_data(name, arr, datatype)
        head["outputs"].append(entry)
    if not blobs:
        return JSONResponse(head)
    header = json.dumps(head).encode()
    return Response(header + b"".join(blobs), media_type="application/octet-stream", headers={HEADER: str(len(header))})
