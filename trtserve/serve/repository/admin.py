"""Repository routes. Triton's repository API (`POST /v2/repository/index`, `.../models/{m}/load`
and `/unload`) and trtserve's admin routes (`/admin/...`: status, load, unload, promote, canary,
rollback, shadow), which `trtserve repo` calls.

Load, unload and every /admin route change what is served, so they take the admin key
(`Authorization: Bearer ADMIN_KEY`), never the API key; without an admin key configured they are
open to clients on the loopback interface only.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtserve.serve.admin_key import ADAPTER_PATHS, RECEIPT_PATHS, require_admin
from trtserve.serve.errors import APIError, error_responses
from trtserve.serve.json_body import JsonBody
from trtserve.serve.openapi import inline_schema
from trtserve.serve.repository import operations
from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.router import ascii_int

router = APIRouter()
_ADMIN_WHY = {
    404: "No such model or version.",
    409: "The version's state does not allow it (e.g. canary of the stable version).",
    503: "The version is loading or unloading, or the server is draining.",
}
# /admin/... answer OpenAI's error body; /v2/repository/... KServe's.
ADMIN = {"responses": error_responses(400, 401, 403, 404, 409, 503, why=_ADMIN_WHY)}
TRITON = {"responses": error_responses(400, 401, 403, 404, 409, 503, kserve=True, why=_ADMIN_WHY)}


class IndexBody(JsonBody):
    model_config = ConfigDict(extra="allow")  # Triton's index request takes other keys; they are ignored
    ready: bool = False  # only the ready models


class LoadParameters(JsonBody):
    """Triton's load/unload body: {"parameters": {"version": "2"}}; other parameters are ignored."""

    model_config = ConfigDict(extra="allow")
    parameters: dict | None = None


def _optional_body(model: type[BaseModel]) -> dict:
    """openapi_extra for a route that reads its (optional) JSON body itself."""
    return {"requestBody": {"required": False, "content": {"application/json": {"schema": inline_schema(model)}}}}


def is_admin_path(path: str) -> bool:
    """Paths the admin key guards (the middleware skips its API-key check for them)."""
    return path.startswith(("/admin/", *RECEIPT_PATHS, *ADAPTER_PATHS)) or (
        path.startswith("/v2/repository/models/") and path.endswith(("/load", "/unload"))
    )


def _admin(request: Request) -> Repository:
    require_admin(request)
    return request.app.state.server.repository


async def _body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


def version_parameter(params: dict) -> list[int] | None:
    """Triton load/unload parameters: trtserve reads `version` ("2" or 2) to act on one version."""
    v = params.get("version")
    if v is None:
        return None
    number = ascii_int(str(v))
    if number is None or number < 1:
        raise APIError(400, f"parameter 'version' is {v!r}; give a positive integer")
    return [number]


# ---- Triton's repository API -----------------------------------------------------------------------
@router.post(
    "/v2/repository/index",
    responses=error_responses(400, 401, 503, kserve=True),
    openapi_extra=_optional_body(IndexBody),
)
async def index(request: Request):
    body = _parse(IndexBody, await _body(request))
    return request.app.state.server.repository.index(ready_only=body.ready)


@router.post("/v2/repository/models/{model}/load", **TRITON, openapi_extra=_optional_body(LoadParameters))
async def triton_load(model: str, request: Request):
    repo = _admin(request)
    body = _parse(LoadParameters, await _body(request))
    await repo.load(model, version_parameter(body.parameters or {}))
    return {}


@router.post("/v2/repository/models/{model}/unload", **TRITON, openapi_extra=_optional_body(LoadParameters))
async def triton_unload(model: str, request: Request):
    repo = _admin(request)
    body = _parse(LoadParameters, await _body(request))
    await repo.unload(model, version_parameter(body.parameters or {}))
    return {}


def _parse(model: type[BaseModel], body: dict):
    try:
        return model.model_validate(body)
    except ValidationError as err:
        e = err.errors()[0]
        raise APIError(400, f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}") from None


# ---- trtserve's admin routes -------------------------------------------------------------------------
class VersionsBody(JsonBody):
    model_config = ConfigDict(extra="forbid")
    versions: list[int] | None = None
    reload: bool = False  # load: a READY version loads again from its dir and replaces the serving one


class VersionBody(JsonBody):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1)


class CanaryBody(VersionBody):
    weight: float
    guard: str | None = None  # "error_rate<0.01,p95_ttft<1.5x"
    window: int = Field(20, ge=1)


class ShadowBody(VersionBody):
    fraction: float


@router.get("/admin/repository", **ADMIN)
async def status(request: Request):
    return status_of(_admin(request))


@router.post("/admin/models/{model}/load", **ADMIN)
async def load(model: str, body: VersionsBody, request: Request):
    repo = _admin(request)
    await repo.load(model, body.versions, reload=body.reload)
    return status_of(repo, model)


@router.post("/admin/models/{model}/unload", **ADMIN)
async def unload(model: str, body: VersionsBody, request: Request):
    repo = _admin(request)
    await repo.unload(model, body.versions)
    return status_of(repo, model)


@router.post("/admin/models/{model}/promote", **ADMIN)
async def promote(model: str, body: VersionBody, request: Request):
    repo = _admin(request)
    operations.promote(repo.model(model), body.version)
    return status_of(repo, model)


@router.post("/admin/models/{model}/canary", **ADMIN)
async def canary(model: str, body: CanaryBody, request: Request):
    repo = _admin(request)
    operations.canary(repo.model(model), body.version, body.weight, body.guard, body.window)
    return status_of(repo, model)


@router.post("/admin/models/{model}/rollback", **ADMIN)
async def rollback(model: str, request: Request):
    repo = _admin(request)
    operations.rollback(repo.model(model), repo.metrics)
    return status_of(repo, model)


@router.post("/admin/models/{model}/shadow", **ADMIN)
async def shadow(model: str, body: ShadowBody, request: Request):
    repo = _admin(request)
    operations.shadow(repo.model(model), body.version, body.fraction)
    repo.shadow.reset(model, body.version)
    return status_of(repo, model)


def status_of(repo: Repository, only: str | None = None) -> dict:
    """Every model (or one): versions with state, reason, in-flight requests, KV bytes and guard
    outcomes; labels, weights, shadow agreement, the guard's last verdict."""
    models = {}
    for name, m in repo.models.items():
        if only is not None and name != only:
            continue
        shadow_stats = None
        if m.policy.shadow is not None:
            stats = repo.shadow.stats.get((name, m.policy.shadow.version))
            shadow_stats = {**m.policy.shadow.model_dump(), **(stats.summary() if stats else {})}
        models[name] = {
            "versions": {
                str(v): {
                    "state": mv.state.value,
                    "reason": mv.reason,
                    "in_flight": mv.in_flight,
                    "kv_cache_bytes": mv.kv_bytes,
                    "served": mv.served,
                    "errors": sum(not o.ok for o in mv.recent),
                }
                for v, mv in sorted(m.versions.items())
            },
            "default": getattr(m.default_version(), "version", None),
            "labels": m.policy.labels,
            "weights": {str(k): w for k, w in m.policy.weights.items()},
            "guard": m.policy.guard.model_dump() if m.policy.guard else None,
            "guard_verdict": repo.guard.last.get(name),
            "shadow": shadow_stats,
            "rollback_depth": len(m.policy.history),
        }
    budget = repo.budget
    return {
        "model_control_mode": repo.mode,
        "kv_cache_memory": budget.total,
        "kv_cache_used": budget.used(),
        "models": models,
    }
