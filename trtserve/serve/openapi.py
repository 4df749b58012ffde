"""What /openapi.json says beyond what FastAPI infers: the bodyless answers of the health routes, the
middleware's refusals on every route, 400 rather than FastAPI's 422 (the KServe routes' bodies are
declared in serve/kserve/docs.py)."""

from __future__ import annotations

from pydantic import BaseModel

from trtserve.serve.errors import KServeErrorBody, OpenAIErrorBody


def inline_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema with its $defs inlined (openapi_extra has no components section)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.rsplit("/", 1)[1]])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


class Live(BaseModel):
    """GET /v2/health/live (Open Inference Protocol)."""

    live: bool


class Ready(BaseModel):
    """GET /v2/health/ready (Open Inference Protocol)."""

    ready: bool


class ModelReady(BaseModel):
    """GET /v2/models/{model}/ready (Open Inference Protocol)."""

    name: str
    ready: bool


def _health(model: type[BaseModel], what: str) -> dict:
    """200 when it is, 400 (Triton's status) when not, both with the protocol's body; a 400 can also
    be the middleware's refusal of the request itself (KServe's error body)."""
    either = {
        "anyOf": [{"$ref": f"#/components/schemas/{model.__name__}"}, {"$ref": "#/components/schemas/KServeErrorBody"}]
    }
    return {
        200: {"model": model, "description": what.capitalize()},
        400: {"description": f"Not {what}, or a bad request", "content": {"application/json": {"schema": either}}},
    }


HEALTH = {503: {"description": "Not alive or not ready; the body says which"}}
V2_LIVE = _health(Live, "live")
V2_READY = _health(Ready, "ready")
MODEL_READY = _health(ModelReady, "ready")


# What ServerMiddleware (serve/middleware.py) can answer on any route before the route runs.
_MIDDLEWARE = {
    400: "X-Request-Id is longer than the limit, or the body is invalid.",
    401: "The API key is missing or wrong.",
    413: "The request body is larger than the server's limit.",
    503: "The model is loading or the server is draining; retry after Retry-After seconds.",
}
_HEALTH_PATHS = ("/health", "/health/ready", "/v2/health/live", "/v2/health/ready")


def truthful_schema(schema: dict) -> dict:
    """Say what the server really answers: validation errors are 400 (errors.py), not FastAPI's
    422, and every route can get the middleware's refusals, with the error body of its protocol;
    /metrics is Prometheus text."""
    paths = schema.get("paths", {})
    if "/metrics" in paths:
        text = {"text/plain": {"schema": {"type": "string"}}}
        paths["/metrics"]["get"]["responses"]["200"] = {"description": "Prometheus text format", "content": text}
    for path, ops in paths.items():
        body = "KServeErrorBody" if path.startswith("/v2") else "OpenAIErrorBody"
        error = {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}}
        codes = [400] if path in _HEALTH_PATHS else list(_MIDDLEWARE)
        for op in ops.values():
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            for code in codes:
                responses.setdefault(str(code), {"description": _MIDDLEWARE[code], "content": error})
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for model in (OpenAIErrorBody, KServeErrorBody):
        if model.__name__ not in schemas:
            schemas.update(_component(model))
    return schema


def _component(model: type[BaseModel]) -> dict:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {model.__name__: schema, **defs}


def install_openapi(app) -> None:
    """/openapi.json: FastAPI's schema, made truthful once (truthful_schema)."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = truthful_schema(get_openapi(title=app.title, version=app.version, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi
