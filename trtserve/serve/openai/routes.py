"""OpenAI-compatible routes: thin wrappers over OpenAIServing."""

from __future__ import annotations

from fastapi import APIRouter, Request

from trtserve.serve.errors import APIError
from trtserve.serve.openai import protocol as p

router = APIRouter()


def _serving(request: Request):
    return request.app.state.server.openai


def _log(request: Request) -> dict:
    return request.scope.setdefault("trtserve_log", {})


@router.get("/v1/models")
async def models(request: Request):
    return _serving(request).models()


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, request: Request):
    serving = _serving(request)
    if model_id != serving.svc.model_name:
        raise APIError(
            404, f"model {model_id!r} does not exist; this server serves {serving.svc.model_name!r}", "model"
        )
    return serving.model_card()


@router.post("/v1/completions")
async def completions(body: p.CompletionRequest, request: Request):
    return await _serving(request).completions(body, request, _log(request))


@router.post("/v1/chat/completions")
async def chat(body: p.ChatCompletionRequest, request: Request):
    return await _serving(request).chat(body, request, _log(request))


@router.post("/tokenize")
async def tokenize(body: p.TokenizeRequest, request: Request):
    return _serving(request).tokenize(body)


@router.post("/detokenize")
async def detokenize(body: p.DetokenizeRequest, request: Request):
    return _serving(request).detokenize(body)
