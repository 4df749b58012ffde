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


NOT_READY = {400: {"description": "Not ready (KServe v2 answers 400 with no body)"}}
HEALTH = {503: {"description": "Not alive or not ready; the body says which"}}
V2_HEALTH = NOT_READY


# What ServerMiddleware (serve/middleware.py) can answer on any route before the route runs.
_MIDDLEWARE = {
    400: "X-Request-Id is longer than the limit, or the body is invalid.",
    401: "The API key is missing or wrong.",
    413: "The request body is larger than the server's limit.",
    503: "The model is loading or the server is draining; retry after Retry-After seconds.",
}
_HEALTH_PATHS = ("/health", "/health/ready", "/v2/health/live", "/v2/health/ready")


_BODYLESS_200 = (
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/models/{model}/ready",
    "/v2/models/{model}/versions/{version}/ready",
)


def truthful_schema(schema: dict) -> dict:
    """Say what the server really answers: validation errors are 400 (errors.py), not FastAPI's
    422, and every route can get the middleware's refusals, with the error body of its protocol;
    KServe's readiness answers have no body and /metrics is Prometheus text."""
    paths = schema.get("paths", {})
    for path in _BODYLESS_200:
        if path in paths:
            paths[path]["get"]["responses"]["200"] = {"description": "Live / ready (no body)"}
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
