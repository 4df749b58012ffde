"""KServe v2 REST infer, metadata and config on a pooling engine (docs/pooling.md, "KServe v2"): the same
PoolingServing the rerank, score and classify routes use, with tensors in and out.

Inputs: `text` (BYTES, one text per element) pools each text; or `query` (BYTES, one element, or one
per document) with `document` (BYTES) scores each pair. Outputs, by what was sent and the model's task:
texts to an embedder give `embedding` (FP32 [n, dims]); texts to a classifier or reranker give `logits`
and `probs` (FP32 [n, labels]); pairs give `score` (FP32 [n]: a reranker's or cross-encoder's relevance,
an embedder's cosine similarity). Request parameter `truncate_prompt_tokens` is honoured as on the
other pooling routes.
"""

from __future__ import annotations

import json

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from trtserve.serve.errors import APIError
from trtserve.serve.kserve.protocol import HEADER, parse_infer
from trtserve.serve.kserve.tensors import _json_data, _raw
from trtserve.serve.pooling.serving import PoolingServing, observed
from trtserve.serve.repository.version import ModelVersion
from trtserve.text.pooling import probabilities

TEXT, QUERY, DOCUMENT = "text", "query", "document"


def _outputs(serving: PoolingServing) -> dict[str, list[int]]:
    """Output name -> shape (-1: any) for texts, then `score` for pairs where the model scores them."""
    c = serving.config
    outs = {"embedding": [-1, c.dimensions]} if c.task == "embed" else {"logits": [-1, c.dimensions]}
    if c.task != "embed":
        outs["probs"] = [-1, c.dimensions]
    if c.task == "embed" or c.scores:
        outs["score"] = [-1]
    return outs


def model_metadata(mv: ModelVersion, versions: list[str], request: Request) -> dict:
    serving = _serving(mv, request)
    inputs = [{"name": n, "datatype": "BYTES", "shape": [-1]} for n in (TEXT, QUERY, DOCUMENT)]
    outputs = [{"name": n, "datatype": "FP32", "shape": s} for n, s in _outputs(serving).items()]
    return {
        "name": mv.model,
        "versions": versions,
        "platform": "trtserve_pooling",
        "inputs": inputs,
        "outputs": outputs,
    }


def model_config(mv: ModelVersion, request: Request) -> dict:
    serving = _serving(mv, request)
    c = serving.config
    inputs = [{"name": n, "data_type": "TYPE_STRING", "dims": [-1], "optional": True} for n in (TEXT, QUERY, DOCUMENT)]
    outputs = [{"name": n, "data_type": "TYPE_FP32", "dims": s} for n, s in _outputs(serving).items()]
    params = {"pooling_task": c.task, "labels": ",".join(c.labels)}
    return {
        "name": mv.model,
        "platform": "trtserve_pooling",
        "backend": "trtserve",
        "max_batch_size": 0,
        "input": inputs,
        "output": outputs,
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


def _serving(mv: ModelVersion, request: Request) -> PoolingServing:
    return PoolingServing.of(mv, request)


def _texts(tensors: dict[str, np.ndarray], name: str) -> list[str]:
    arr = tensors[name]
    if arr.dtype != np.object_:
        raise APIError(400, f"input {name!r} must be BYTES (UTF-8 text)")
    try:
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)]
    except UnicodeDecodeError:
        raise APIError(400, f"input {name!r} is not UTF-8 text") from None


async def _run(serving: PoolingServing, tensors: dict, truncate: int | None, request: Request) -> dict:
    """Output name -> array, for texts or for pairs."""
    names = set(tensors)
    if names == {TEXT}:
        texts = _texts(tensors, TEXT)
        async with observed(request, serving.task, len(texts)) as usage:
            raw, usage["tokens"] = await serving.raw(texts, truncate)
        out = np.asarray(raw, dtype=np.float32).reshape(len(texts), -1)
        if serving.task == "embed":
            return {"embedding": out}
        return {"logits": out, "probs": np.asarray([probabilities(serving.config, r) for r in raw], dtype=np.float32)}
    if names == {QUERY, DOCUMENT}:
        queries, docs = _texts(tensors, QUERY), _texts(tensors, DOCUMENT)
        if len(queries) not in (1, len(docs)):
            raise APIError(
                400, f"query holds {len(queries)} texts and document {len(docs)}; send one query, or one each"
            )
        pairs = list(zip(queries * len(docs) if len(queries) == 1 else queries, docs, strict=True))
        async with observed(request, "score", len(pairs)) as usage:
            scores, usage["tokens"] = await serving.pair_scores(pairs, truncate, "KServe infer")
        return {"score": np.asarray(scores, dtype=np.float32)}
    raise APIError(
        400,
        f"model {serving.model!r} takes input {TEXT!r}, or {QUERY!r} with {DOCUMENT!r} (BYTES); got {sorted(names)}",
    )


async def infer(mv: ModelVersion, raw: bytes, request: Request) -> Response:
    req, tensors = parse_infer(raw, request.headers.get(HEADER))
    params = req.parameters or {}
    truncate = params.get("truncate_prompt_tokens")
    if truncate is not None and (isinstance(truncate, bool) or not isinstance(truncate, int) or truncate < 1):
        raise APIError(400, f"parameter 'truncate_prompt_tokens' is {truncate!r}; give a positive integer")
    serving = _serving(mv, request)
    arrays = await _run(serving, tensors, truncate, request)
    if req.outputs:
        unknown = [o.name for o in req.outputs if o.name not in arrays]
        if unknown:
            raise APIError(400, f"unknown output {unknown[0]!r} for these inputs; this call gives {sorted(arrays)}")
        arrays = {o.name: arrays[o.name] for o in req.outputs}
    return _respond(mv, req, arrays, params)


def _respond(mv: ModelVersion, req, arrays: dict[str, np.ndarray], params: dict) -> Response:
    binary_default = bool(params.get("binary_data_output", False))
    per_output = {o.name: (o.parameters or {}).get("binary_data") for o in req.outputs or []}
    head: dict = {"model_name": mv.model, "model_version": str(mv.version), "outputs": []}
    if req.id is not None:
        head["id"] = req.id
    blobs = []
    for name, arr in arrays.items():
        entry: dict = {"name": name, "datatype": "FP32", "shape": list(arr.shape)}
        binary = per_output.get(name)
        if binary if binary is not None else binary_default:
            blob = _raw(arr, "FP32")
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_data(name, arr, "FP32")
        head["outputs"].append(entry)
    if not blobs:
        return JSONResponse(head)
    header = json.dumps(head).encode()
    return Response(header + b"".join(blobs), media_type="application/octet-stream", headers={HEADER: str(len(header))})
