"""vLLM's LoRA admin routes: `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` and
`POST /v1/unload_lora_adapter {"lora_name"}`, with vLLM's bodies and plain-text answers.

They change what is served, so they take the admin key (serve/admin_key.py). The adapter goes to
every ready version of its base model: the server's only LLM model, or the one `base_model` names
when it serves several. Loading a served name again replaces it (requests already running finish on
the old weights); an adapter may not take a served model's name.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from trtserve.engine.errors import UnsupportedError
from trtserve.serve.admin_key import require_admin
from trtserve.serve.errors import APIError, error_responses, parse_body
from trtserve.serve.json_body import JsonBody
from trtserve.serve.openapi import inline_schema
from trtserve.serve.repository import adapters as lora
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.version import ModelVersion

router = APIRouter()
_WHY = {
    400: "The adapter does not fit the base model, its name is taken by a model, or the body is wrong.",
    404: "No adapter of that name is served (unload), or no such base model.",
    501: "The base model's engine serves no LoRA adapters.",
    503: "The base model has no ready version.",
}
_RESPONSES = error_responses(400, 401, 403, 404, 501, 503, why=_WHY) | {
    200: {"content": {"text/plain": {}}, "description": "Success: one sentence, as vLLM answers"}
}


class LoadLoRAAdapterRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)  # the model name requests select it by
    lora_path: str = Field(min_length=1)  # a PEFT adapter dir on the server's disk
    load_inplace: bool = False  # vLLM's; trtserve always replaces a same-named adapter in place
    base_model: str | None = None  # trtserve: the base model, when the server serves several


class UnloadLoRAAdapterRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None  # vLLM's; not used
    base_model: str | None = None


def _body(model: type[BaseModel]) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline_schema(model)}}}}


@router.post("/v1/load_lora_adapter", responses=_RESPONSES, openapi_extra=_body(LoadLoRAAdapterRequest))
async def load_lora_adapter(request: Request):
    require_admin(request)
    body = parse_body(LoadLoRAAdapterRequest, await request.body())
    repo: Repository = request.app.state.server.repository
    base = _base(repo, body.base_model)
    lora.check_name(repo.models, body.lora_name, base.name)
    added = []  # versions that did not serve the name before: a later version's refusal undoes these
    try:
        for mv in _versions(base):
            new = not _serves(mv, body.lora_name)
            await mv.engine.load_adapter(body.lora_name, Path(body.lora_path))  # type: ignore[union-attr]
            added += [mv] if new else []
    except Exception as err:
        for mv in added:
            await mv.engine.unload_adapter(body.lora_name)  # type: ignore[union-attr]
        if isinstance(err, UnsupportedError):
            raise APIError(501, str(err)) from None
        raise
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")


@router.post("/v1/unload_lora_adapter", responses=_RESPONSES, openapi_extra=_body(UnloadLoRAAdapterRequest))
async def unload_lora_adapter(request: Request):
    require_admin(request)
    body = parse_body(UnloadLoRAAdapterRequest, await request.body())
    repo: Repository = request.app.state.server.repository
    base = _base(repo, body.base_model) if body.base_model is not None else lora.base_of(repo.models, body.lora_name)
    versions = [] if base is None else [mv for mv in _versions(base) if _serves(mv, body.lora_name)]
    if not versions:
        raise APIError(404, f"no LoRA adapter named {body.lora_name!r} is served; GET /v1/models lists them")
    for mv in versions:
        await mv.engine.unload_adapter(body.lora_name)  # type: ignore[union-attr]
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")


def _base(repo: Repository, name: str | None) -> RepoModel:
    """The model `name` names, or the only model whose engines serve adapters."""
    if name is not None:
        return repo.model(name)
    llms = [m for m in repo.models.values() if any(mv.engine is not None for mv in m.versions.values())]
    if len(llms) == 1:
        return llms[0]
    if not llms:
        raise APIError(503, "no LLM model is loaded here to serve a LoRA adapter; retry once one is ready")
    names = ", ".join(repr(m.name) for m in llms)
    raise APIError(400, f"this server serves several models ({names}); name the adapter's base in base_model")


def _versions(m: RepoModel) -> list[ModelVersion]:
    """The ready versions of `m` (503 when it has none; 501 when their engines serve no adapters)."""
    ready = [mv for mv in m.ready_versions() if mv.engine is not None]
    if not ready:
        raise m.unavailable()
    if not all(mv.engine.info.capabilities.lora for mv in ready):  # type: ignore[union-attr]
        raise APIError(
            501, f"model {m.name!r} serves no LoRA adapters; start it with the `lora` engine option (or --lora)"
        )
    return ready


def _serves(mv: ModelVersion, name: str) -> bool:
    return any(ref.name == name for ref in mv.engine.adapters())  # type: ignore[union-attr]
