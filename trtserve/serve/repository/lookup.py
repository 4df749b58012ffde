"""How a front end (OpenAI, KServe, gRPC) finds the version that answers a request. The version is
written to the request's context (serve/context.py), so the access log, the `X-Model-Version`
header and the HTTP status metric all name it."""

from __future__ import annotations

from fastapi import Request

from trtserve.serve.context import request_context
from trtserve.serve.errors import APIError
from trtserve.serve.repository.kinds import FrontEnd
from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.router import parse_target
from trtserve.serve.repository.version import ModelVersion

SESSION_HEADER = "x-session-id"
_WANTS = {
    FrontEnd.GENERATE: "an LLM",
    FrontEnd.INFER: "a KServe model",
    FrontEnd.EMBEDDINGS: "an embedding model",
    FrontEnd.POOLING: "a pooling model (docs/pooling.md)",
}


def routed(
    request: Request,
    spec: str | None,
    version: str | None = None,
    key: str | None = None,
    *,
    front_end: FrontEnd | None = FrontEnd.GENERATE,
) -> ModelVersion:
    """The READY version for `spec` (APIError 404 / 503 otherwise), sticky on `key` or X-Session-Id.
    front_end: what the route serves, a version whose kind it does not serve is a 400 (`refuse`);
    None: the route answers that itself (/v1/embeddings: a 404 naming the models it serves)."""
    repo: Repository = request.app.state.server.repository
    mv = repo.route(spec, key if key is not None else request.headers.get(SESSION_HEADER), version)
    request_context(request.scope).routed(mv.model, mv.version)
    if front_end is not None:
        refuse(mv, front_end)
    return mv


def refuse(mv: ModelVersion, front_end: FrontEnd = FrontEnd.GENERATE) -> None:
    """A route asked for a model whose kind it does not serve: say which route serves it."""
    if not mv.kind.serves(front_end):
        raise APIError(
            400,
            f"model {mv.model!r} is {mv.kind.noun}, not {_WANTS[front_end]}; {mv.kind.hint.format(model=mv.model)}",
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
