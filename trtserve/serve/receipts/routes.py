"""Admin routes of receipts and the prefix cache (the admin key guards them: admin.py).

GET  /v1/receipts/{id}      a stored receipt (--receipts on|hashes)
POST /v1/replay             {receipt, prompt_token_ids?, allow_other_engine?}: run it again here
POST /v1/cache/invalidate   {namespace, before_version?, model?}: drop a namespace's cached prefixes
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from trtserve.engine.errors import UnsupportedError, UserError
from trtserve.engine.request_options import RequestOptions
from trtserve.serve.admin_key import require_admin
from trtserve.serve.errors import APIError, error_responses, parse_body
from trtserve.serve.generation import GenerationService
from trtserve.serve.json_body import JsonBody
from trtserve.serve.openapi import inline_schema
from trtserve.serve.receipts.book import engine_identity
from trtserve.serve.receipts.model import Receipt
from trtserve.serve.receipts.replay import (
    ReplayResult,
    adapter_of,
    check_engine,
    params_of,
    prompt_of,
    sequences_of,
)

router = APIRouter()


class InvalidateRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")
    namespace: str = Field(min_length=1, max_length=256)
    before_version: int | None = Field(None, ge=0)  # only versions older than this (and unversioned blocks)
    model: str | None = None  # one model's engines; default: every loaded one


class ReplayRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")
    receipt: Receipt
    prompt_token_ids: list[int] | None = None  # for a receipt stored with --receipts hashes
    allow_other_engine: bool = False


def _body(model: type[BaseModel]) -> dict:
    """openapi_extra of a route that reads its JSON body itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline_schema(model)}}}}


_RECEIPT_WHY = {404: "Receipts are off here (--receipts), or no such receipt is stored."}
_CACHE_WHY = {404: "No such model is loaded here.", 501: "The model's backend cannot invalidate cached prefixes."}
_REPLAY_WHY = {
    404: "The receipt's model is not loaded here.",
    409: "The receipt was made by another engine; set allow_other_engine to replay it anyway.",
}


def services(request: Request, model: str | None = None) -> list[GenerationService]:
    """The loaded generation services (every model version's), or those of `model`."""
    repo = request.app.state.server.repository
    found = [mv.service for mv in repo.versions() if mv.service is not None]
    if model is not None:
        found = [s for s in found if s.model_name == model]
        if not found:
            raise APIError(404, f"model {model!r} has no loaded version here; check GET /v1/models")
    return found


@router.get("/v1/receipts/{receipt_id}", responses=error_responses(401, 403, 404, why=_RECEIPT_WHY))
async def get_receipt(receipt_id: str, request: Request):
    require_admin(request)
    recorder = request.app.state.receipts.recorder
    if recorder is None:
        raise APIError(404, "receipts are not stored on this server; start it with --receipts on (or hashes)")
    receipt = await asyncio.to_thread(recorder.get, receipt_id)
    if receipt is None:
        raise APIError(404, f"no receipt {receipt_id!r} is stored here")
    return receipt


@router.post(
    "/v1/cache/invalidate",
    responses=error_responses(400, 401, 403, 404, 501, why=_CACHE_WHY),
    openapi_extra=_body(InvalidateRequest),
)
async def invalidate(request: Request):
    require_admin(request)
    body = parse_body(InvalidateRequest, await request.body())
    dropped = 0
    try:
        for svc in services(request, body.model):
            dropped += await svc.engine.invalidate_cache(body.namespace, body.before_version)
    except UnsupportedError as err:
        raise APIError(501, str(err)) from None
    return {"namespace": body.namespace, "before_version": body.before_version, "blocks_invalidated": dropped}


@router.post(
    "/v1/replay",
    responses=error_responses(400, 401, 403, 404, 409, 429, 503, 504, why=_REPLAY_WHY),
    openapi_extra=_body(ReplayRequest),
)
async def replay(request: Request):
    """Run a receipt's request again on this server's engine for that model; the client compares."""
    require_admin(request)
    body = parse_body(ReplayRequest, await request.body())
    receipt = body.receipt
    svc = next((s for s in services(request) if s.model_name == receipt.model), None)
    if svc is None:
        raise APIError(404, f"model {receipt.model!r} of receipt {receipt.id} is not loaded on this server")
    identity = engine_identity(svc.engine.info)
    try:
        check_engine(receipt, identity, body.allow_other_engine)
        adapter = adapter_of(receipt, svc.engine.adapters())
    except UserError as err:
        raise APIError(409, str(err)) from None
    prompt, params = prompt_of(receipt, body.prompt_token_ids), params_of(receipt)
    c = receipt.cache
    options = RequestOptions(
        client_id=f"replay-{receipt.id}",
        cache_namespace=c.namespace,
        context_version=c.context_version,
        adapter=adapter,
    )
    run = svc.start(prompt, params, options)
    out = await run.collect()
    outputs = sequences_of(out.outputs)
    result = ReplayResult(engine=identity, outputs=outputs, cached_tokens=out.num_cached_tokens, receipt=run.receipt_id)
    return result.model_dump(mode="json")
