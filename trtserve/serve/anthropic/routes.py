"""Anthropic Messages routes: thin wrappers over MessagesServing. `anthropic-version`,
`anthropic-beta` and the `?beta=true` query Claude Code sends are accepted and not read."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from trtserve.serve.anthropic.errors import AnthropicEdge, error_responses
from trtserve.serve.anthropic.protocol import CountTokensRequest, MessagesRequest
from trtserve.serve.anthropic.serving import MessagesServing
from trtserve.serve.context import request_context
from trtserve.serve.openai.serving import OpenAIServing
from trtserve.serve.repository.lookup import routed

router = APIRouter(tags=["anthropic"])
_CREATE = {
    200: {"content": {"text/event-stream": {}}, "description": "The message, or with stream: true its events"}
} | error_responses(400, 401, 404, 413, 429, 501, 503, 504)


def install_anthropic(app: FastAPI) -> None:
    """The routes, and their edge (x-api-key, Anthropic's error bodies) outside every other middleware:
    call it after the server's own middleware is added."""
    app.include_router(router)
    app.add_middleware(AnthropicEdge)


def _serving(request: Request, model: str, user: str | None = None) -> MessagesServing:
    return MessagesServing(OpenAIServing(routed(request, model, key=user).service))


@router.post("/v1/messages", responses=_CREATE)
async def create(body: MessagesRequest, request: Request):
    answer = await _serving(request, body.model, body.user()).create(body, request, request_context(request.scope))
    if isinstance(answer, dict):
        return JSONResponse(answer)
    return StreamingResponse(answer, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.post("/v1/messages/count_tokens", responses=error_responses(400, 401, 404, 413, 503))
async def count_tokens(body: CountTokensRequest, request: Request):
    return await _serving(request, body.model).count_tokens(body)
