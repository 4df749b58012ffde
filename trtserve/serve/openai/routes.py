"""OpenAI-compatible routes: thin wrappers over OpenAIServing, which answers a body or its events."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from trtserve.serve.context import request_context
from trtserve.serve.errors import APIError, error_responses
from trtserve.serve.openai import protocol as p
from trtserve.serve.openai.serving import Answer, OpenAIServing, model_list
from trtserve.serve.repository.lookup import routed
from trtserve.serve.repository.router import parse_target

router = APIRouter()
_STREAM = {
    200: {
        "content": {"text/event-stream": {}},
        "description": "JSON, or with stream: true server-sent events",
    }
}
_GENERATE = _STREAM | error_responses(400, 401, 404, 413, 429, 501, 503, 504)


def _serving(request: Request, model: str | None = None, user: str | None = None) -> OpenAIServing:
    """The serving logic of the version the repository routes `model` to (sticky on `user`)."""
    return OpenAIServing(routed(request, model, key=user).service)


def _generating(request: Request, body: p.SamplingFields) -> OpenAIServing:
    """The serving logic for a completion body: `model`, or TensorRT-LLM's `lora_request` naming an adapter."""
    if body.lora_request is None:
        return _serving(request, body.model, body.user)
    name = body.lora_request.lora_name
    mv = routed(request, name, key=body.user)
    if body.model is not None and parse_target(body.model).model not in (name, mv.model):
        raise APIError(
            400,
            f"model {body.model!r} is not the base of lora_request's adapter {name!r} ({mv.model!r}); name one",
            "model",
        )
    return OpenAIServing(mv.service)


def _respond(answer: Answer) -> JSONResponse | StreamingResponse:
    if isinstance(answer, dict):
        return JSONResponse(answer)
    return StreamingResponse(answer, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get("/v1/models", responses=error_responses(401, 503))
async def models(request: Request):
    return model_list(request.app.state.server.repository)


@router.get("/v1/models/{model_id:path}", responses=error_responses(401, 404, 503))
async def model(model_id: str, request: Request):
    return _serving(request, model_id).model_card(model_id)


@router.post("/v1/completions", responses=_GENERATE)
async def completions(body: p.CompletionRequest, request: Request):
    serving = _generating(request, body)
    return _respond(await serving.completions(body, request, request_context(request.scope)))


@router.post("/v1/chat/completions", responses=_GENERATE)
async def chat(body: p.ChatCompletionRequest, request: Request):
    serving = _generating(request, body)
    return _respond(await serving.chat(body, request, request_context(request.scope)))


@router.post("/tokenize", responses=error_responses(400, 401, 404, 413, 503))
async def tokenize(body: p.TokenizeRequest, request: Request):
    return await _serving(request, body.model).tokenize(body)


@router.post("/detokenize", responses=error_responses(400, 401, 404, 413, 503))
async def detokenize(body: p.DetokenizeRequest, request: Request):
    return _serving(request, body.model).detokenize(body)
