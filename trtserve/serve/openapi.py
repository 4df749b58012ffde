"""What /openapi.json says beyond what FastAPI infers: the KServe routes read their bodies themselves
(binary tensors, Triton's loose scalars), so their request bodies are declared here, and the
bodyless answers of the health routes."""

from __future__ import annotations

from pydantic import BaseModel

from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.errors import KServeErrorBody, OpenAIErrorBody, error_responses
from trtserve.serve.kserve.protocol import GenerateInputs, InferRequest


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


def _generate_schema() -> dict:
    """The Triton generate body: text_input, the ensemble's optional inputs as keys or under
    `parameters`, and the client's id."""
    inputs = inline_schema(GenerateInputs)
    props = dict(inputs["properties"])
    props["text_input"] = {"type": "string"}
    props["id"] = {"type": "string", "maxLength": MAX_CLIENT_ID}
    props["parameters"] = {"type": "object", "properties": inputs["properties"], "additionalProperties": False}
    return {"type": "object", "properties": props, "required": ["text_input"], "additionalProperties": False}


def _body(schema: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


INFER_BODY = _body(inline_schema(InferRequest))
GENERATE_BODY = _body(_generate_schema())
_NOT_READY = {400: {"description": "Not ready (KServe v2 answers 400 with no body)"}}
KSERVE_READY = _NOT_READY | error_responses(401, 404, 503, kserve=True)
KSERVE_GENERATE = error_responses(400, 401, 404, 413, 429, 501, 503, 504, kserve=True)
KSERVE_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "events"}}
KSERVE_INFER = {
    200: {
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "description": "JSON, or a JSON header and binary tensors when binary outputs were asked for",
    }
}
HEALTH = {503: {"description": "Not alive or not ready; the body says which"}}
V2_HEALTH = _NOT_READY

# The keyword arguments of each KServe route decorator.
SERVER = {"responses": error_responses(401, 503, kserve=True)}
METADATA = {"responses": error_responses(401, 404, 503, kserve=True)}
READY = {"responses": KSERVE_READY}
INFER = {"responses": KSERVE_INFER | KSERVE_GENERATE, "openapi_extra": INFER_BODY}
GENERATE = {"responses": KSERVE_GENERATE, "openapi_extra": GENERATE_BODY}
GENERATE_STREAM = {"responses": KSERVE_STREAM | KSERVE_GENERATE, "openapi_extra": GENERATE_BODY}

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
