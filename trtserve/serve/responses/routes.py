"""Responses API routes: thin wrappers over ResponsesServing (create) and the Responses feature
(retrieve, delete, cancel)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from trtserve.serve.context import request_context
from trtserve.serve.errors import error_responses
from trtserve.serve.openai.serving import OpenAIServing
from trtserve.serve.repository.lookup import routed
from trtserve.serve.responses import store as rows
from trtserve.serve.responses.protocol import ResponsesRequest
from trtserve.serve.responses.registry import Responses
from trtserve.serve.responses.serving import ResponsesServing

router = APIRouter()
_CREATE = {
    200: {"content": {"text/event-stream": {}}, "description": "The response, or with stream: true its events"}
} | error_responses(400, 401, 404, 413, 429, 501, 503, 504)
_STORED = error_responses(400, 401, 404)


def install_responses(app: FastAPI, server) -> None:
    """The routes, and the feature over the state store (server.store, opened already)."""
    app.include_router(router)
    app.state.responses = Responses(server.store)
    if server.store is not None:
        rows.fail_unfinished(server.store)  # background responses the previous process was running


def _feature(request: Request) -> Responses:
    return request.app.state.responses


@router.post("/v1/responses", responses=_CREATE)
async def create(body: ResponsesRequest, request: Request):
    chat = OpenAIServing(routed(request, body.model, key=body.user).service)
    answer = await ResponsesServing(chat, _feature(request)).create(body, request, request_context(request.scope))
    if isinstance(answer, dict):
        return JSONResponse(answer)
    return StreamingResponse(answer, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get("/v1/responses/{response_id}", responses=_STORED)
async def retrieve(response_id: str, request: Request):
    return (await _feature(request).find(response_id)).body


@router.delete("/v1/responses/{response_id}", responses=_STORED)
async def delete(response_id: str, request: Request):
    return await _feature(request).delete(response_id)


@router.post("/v1/responses/{response_id}/cancel", responses=_STORED)
async def cancel(response_id: str, request: Request):
    return await _feature(request).cancel(response_id)


@router.get("/v1/responses/{response_id}/input_items", responses=_STORED)
async def input_items(
    response_id: str,
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
):
    return await _feature(request).input_items(response_id, limit, order, after)
