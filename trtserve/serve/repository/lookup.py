"""How a front end (OpenAI, KServe, gRPC) finds the version that answers a request. The version is
written to the request's context (serve/context.py), so the access log, the `X-Model-Version`
header and the HTTP status metric all name it."""

from __future__ import annotations

from fastapi import Request

from trtserve.serve.context import request_context
from trtserve.serve.errors import APIError
from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.router import parse_target
from trtserve.serve.repository.version import ModelVersion

SESSION_HEADER = "x-session-id"


def routed(
    request: Request, spec: str | None, version: str | None = None, key: str | None = None, tensor_ok: bool = False
) -> ModelVersion:
    """The READY version for `spec` (APIError 404 / 503 otherwise), sticky on `key` or X-Session-Id.
    tensor_ok: the route serves tensor models too (KServe infer, metadata); else they are a 400."""
    repo: Repository = request.app.state.server.repository
    mv = repo.route(spec, key if key is not None else request.headers.get(SESSION_HEADER), version)
    request_context(request.scope).routed(mv.model, mv.version)
    if not tensor_ok:
        refuse_tensor(mv)
    return mv


def refuse_tensor(mv: ModelVersion) -> None:
    """A route that generates text, asked for a tensor model: say which route serves it."""
    if mv.is_tensor:
        raise APIError(
            400,
            f"model {mv.model!r} is a tensor model, not an LLM; send its inputs to POST /v2/models/{mv.model}/infer "
            "(KServe v2, or gRPC ModelInfer)",
            "model",
        )


def version_ready(repo: Repository, spec: str, version: str | None) -> bool:
    """Triton's model readiness: that version (or the model's default) is READY; 404 if unknown."""
    target = parse_target(spec, version)
    m = repo.model(target.model, adapters=True)  # a LoRA adapter is ready where its base is
    if target.version is not None:
        return m.version(target.version).ready
    if target.label is not None:
        number = m.policy.labels.get(target.label)
        return number is not None and m.version(number).ready
    return m.default_version() is not None
