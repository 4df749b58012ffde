"""KServe v2 and Triton extension routes: thin wrappers over KServeServing."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response

from trtserve.serve.errors import APIError

router = APIRouter()


def _serving(request: Request):
    return request.app.state.server.kserve


def _log(request: Request) -> dict:
    return request.scope.setdefault("trtserve_log", {})


async def _json(request: Request):
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "the request body is not valid JSON") from None


@router.get("/v2")
async def server_metadata(request: Request):
    return _serving(request).server_metadata()


@router.get("/v2/models/{model}")
@router.get("/v2/models/{model}/versions/{version}")
async def model_metadata(request: Request, model: str, version: str | None = None):
    _serving(request).check_model(model, version)
    return _serving(request).model_metadata()


@router.get("/v2/models/{model}/ready")
@router.get("/v2/models/{model}/versions/{version}/ready")
async def model_ready(request: Request, model: str, version: str | None = None):
    _serving(request).check_model(model, version)
    return Response(status_code=200 if request.app.state.server.is_ready else 400)


@router.get("/v2/models/{model}/config")
@router.get("/v2/models/{model}/versions/{version}/config")
async def model_config(request: Request, model: str, version: str | None = None):
    _serving(request).check_model(model, version)
    return _serving(request).model_config()


@router.post("/v2/models/{model}/infer")
@router.post("/v2/models/{model}/versions/{version}/infer")
async def infer(request: Request, model: str, version: str | None = None):
    _serving(request).check_model(model, version)
    return await _serving(request).infer(await request.body(), request.headers, request, _log(request))


@router.post("/v2/models/{model}/generate")
@router.post("/v2/models/{model}/versions/{version}/generate")
async def generate(request: Request, model: str, version: str | None = None):
    _serving(request).check_model(model, version)
    return await _serving(request).generate(await _json(request), request, _log(request))


@router.post("/v2/models/{model}/generate_stream")
@router.post("/v2/models/{model}/versions/{version}/generate_stream")
async def generate_stream(request: Request, model: str, version: str | None = None):
    _serving(request).check_model(model, version)
    return _serving(request).generate_stream(await _json(request), _log(request))
