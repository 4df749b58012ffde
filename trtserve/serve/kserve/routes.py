"""KServe v2 and Triton extension routes: thin wrappers over KServeServing (LLMs) and
TensorServing (tensor models: infer, metadata, config; generate is LLM-only)."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from trtserve.serve.context import request_context
from trtserve.serve.errors import APIError
from trtserve.serve.kserve import docs as doc
from trtserve.serve.kserve import pooling, tensors
from trtserve.serve.kserve.protocol import HEADER
from trtserve.serve.kserve.serving import KServeServing
from trtserve.serve.repository.kinds import FrontEnd, Tensors
from trtserve.serve.repository.lookup import refuse, routed, version_ready
from trtserve.serve.repository.router import parse_target
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.tensors.serving import TensorServing
from trtserve.serve.tensors.statistics import model_stats
from trtserve.serve.unicode import check_unicode

router = APIRouter()

# How each kind's tensors are served (serve/repository/kinds.py's `tensors`): metadata, config, infer.
_METADATA: dict[Tensors, Callable[[ModelVersion, list[str]], dict]] = {
    Tensors.TEXT: lambda mv, versions: {**KServeServing(mv.service).model_metadata(), "versions": versions},
    Tensors.CONFIG: lambda mv, versions: TensorServing.of(mv).model_metadata(versions),
}
_CONFIG: dict[Tensors, Callable[[ModelVersion], dict]] = {
    Tensors.TEXT: lambda mv: KServeServing(mv.service).model_config(),
    Tensors.CONFIG: lambda mv: TensorServing.of(mv).model_config(),
}


async def _infer_text(mv: ModelVersion, raw: bytes, request: Request):
    return await KServeServing(mv.service).infer(raw, request.headers, request, request_context(request.scope))


async def _infer_config(mv: ModelVersion, raw: bytes, request: Request):
    return await tensors.infer(TensorServing.of(mv), raw, request.headers.get(HEADER))


_INFER = {Tensors.TEXT: _infer_text, Tensors.CONFIG: _infer_config, Tensors.POOLED: pooling.infer}


def _routed_infer(request: Request, model: str, version: str | None) -> ModelVersion:
    """The version KServe infer, metadata and config address: a KServe model, or a pooling engine
    (its kind's tensors are POOLED: REST only, so the kind does not list INFER for gRPC)."""
    mv = routed(request, model, version, front_end=None)
    if mv.kind.tensors is not Tensors.POOLED:
        refuse(mv, FrontEnd.INFER)
    return mv


def _serving(request: Request, model: str, version: str | None = None) -> KServeServing:
    """The serving logic of the version the repository routes `model` (and `version`) to."""
    return KServeServing(routed(request, model, version).service)


async def _json(request: Request):
    try:
        raw = await request.body()
        body = json.loads(raw)
        check_unicode(body, raw)
        return body
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "the request body is not valid JSON") from None
    except RecursionError:  # tests/fuzz: a deeply nested body was a 500
        raise APIError(400, "the request body is nested too deeply") from None
    except ValueError as err:
        raise APIError(400, str(err)) from None


@router.get("/v2", **doc.SERVER)
async def server_metadata(request: Request):
    metrics = (
        request.app.state.server.metrics
    )  # utilisation detail (serve/telemetry/utilisation.py) beside Triton's fields
    extra = {"utilisation": metrics.utilisation()} if metrics is not None else {}
    return KServeServing.server_metadata() | extra


# Before /v2/models/{model}: "stats" is this route, not a model's metadata.
@router.get("/v2/models/stats", **doc.METADATA)
async def all_statistics(request: Request):
    """Triton's statistics extension: every loaded version's counts and cumulative durations."""
    return {"model_stats": model_stats(request.app.state.server.repository, None, None)}


@router.get("/v2/models/{model}/stats", **doc.METADATA)
async def model_statistics(request: Request, model: str):
    """One model's loaded versions in the statistics extension's shape."""
    repo = request.app.state.server.repository
    return {"model_stats": model_stats(repo, parse_target(model).model, None)}


@router.get("/v2/models/{model}/versions/{version}/stats", **doc.METADATA)
async def version_statistics(request: Request, model: str, version: str):
    """One version's entry (400 for a version that is not loaded, as Triton answers)."""
    repo = request.app.state.server.repository
    return {"model_stats": model_stats(repo, parse_target(model).model, version)}


@router.get("/v2/models/{model}", **doc.METADATA)
@router.get("/v2/models/{model}/versions/{version}", **doc.METADATA)
async def model_metadata(request: Request, model: str, version: str | None = None):
    mv = _routed_infer(request, model, version)
    m = request.app.state.server.repository.model(parse_target(model).model, adapters=True)
    versions = [str(v.version) for v in m.ready_versions()]
    if mv.kind.tensors is Tensors.POOLED:
        return pooling.model_metadata(mv, versions, request)
    return _METADATA[mv.kind.tensors](mv, versions)


@router.get("/v2/models/{model}/ready", **doc.READY)
@router.get("/v2/models/{model}/versions/{version}/ready", **doc.READY)
async def model_ready(request: Request, model: str, version: str | None = None):
    server = request.app.state.server
    ready = not server.draining and version_ready(server.repository, model, version)
    # the Open Inference Protocol's body, with Triton's status (400: not ready)
    return JSONResponse({"name": model, "ready": ready}, status_code=200 if ready else 400)


@router.get("/v2/models/{model}/config", **doc.METADATA)
@router.get("/v2/models/{model}/versions/{version}/config", **doc.METADATA)
async def model_config(request: Request, model: str, version: str | None = None):
    mv = _routed_infer(request, model, version)
    if mv.kind.tensors is Tensors.POOLED:
        return pooling.model_config(mv, request)
    return _CONFIG[mv.kind.tensors](mv)


@router.post("/v2/models/{model}/infer", **doc.INFER)
@router.post("/v2/models/{model}/versions/{version}/infer", **doc.INFER)
async def infer(request: Request, model: str, version: str | None = None):
    raw = await request.body()  # read before routing: no await between the choice and admission
    mv = _routed_infer(request, model, version)
    return await _INFER[mv.kind.tensors](mv, raw, request)


@router.post("/v2/models/{model}/generate", **doc.GENERATE)
@router.post("/v2/models/{model}/versions/{version}/generate", **doc.GENERATE)
async def generate(request: Request, model: str, version: str | None = None):
    body = await _json(request)
    return await _serving(request, model, version).generate(body, request, request_context(request.scope))


@router.post("/v2/models/{model}/generate_stream", **doc.GENERATE_STREAM)
@router.post("/v2/models/{model}/versions/{version}/generate_stream", **doc.GENERATE_STREAM)
async def generate_stream(request: Request, model: str, version: str | None = None):
    body = await _json(request)
    return await _serving(request, model, version).generate_stream(body, request_context(request.scope))
