"""How a front end (OpenAI, KServe, gRPC) finds the version that answers a request, and what
`/v1/models` lists. The version is written to the request's log fields, so the access log, the
`X-Model-Version` header and the HTTP status metric all name it."""

from __future__ import annotations

from fastapi import Request

from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.router import parse_target
from trtserve.serve.repository.version import ModelVersion

SESSION_HEADER = "x-session-id"


def routed(request: Request, spec: str | None, version: str | None = None, key: str | None = None) -> ModelVersion:
    """The READY version for `spec` (APIError 404 / 503 otherwise), sticky on `key` or X-Session-Id."""
    repo: Repository = request.app.state.server.repository
    mv = repo.route(spec, key if key is not None else request.headers.get(SESSION_HEADER), version)
    log = request.scope.setdefault("trtserve_log", {})
    log["model"], log["version"] = mv.model, str(mv.version)
    return mv


def version_ready(repo: Repository, spec: str, version: str | None) -> bool:
    """Triton's model readiness: that version (or the model's default) is READY; 404 if unknown."""
    target = parse_target(spec, version)
    m = repo.model(target.model)
    if target.version is not None:
        return m.version(target.version).ready
    if target.label is not None:
        number = m.policy.labels.get(target.label)
        return number is not None and m.version(number).ready
    return m.default_version() is not None


def model_list(repo: Repository) -> dict:
    """/v1/models: every model, then (in a repository) each of its versions (`name:V`) and labels (`name@L`)."""
    data = []
    for name, m in repo.models.items():
        default = m.default_version()
        card = {"object": "model", "owned_by": "trtserve"}
        if default is not None and default.openai is not None:
            card = default.openai.model_card()
        data.append({**card, "id": name, "versions": [str(v) for v in sorted(m.versions)], "labels": m.policy.labels})
        if repo.single:
            continue  # an engine dir: one model, one version, listed as before
        for _, mv in sorted(m.versions.items()):
            data.append({"id": mv.name, "object": "model", "owned_by": "trtserve", "state": mv.state.value})
        for label, v in sorted(m.policy.labels.items()):
            data.append({"id": f"{name}@{label}", "object": "model", "owned_by": "trtserve", "version": str(v)})
    return {"object": "list", "data": data}
