"""What /openapi.json says of the KServe routes beyond what FastAPI infers: they read their bodies
themselves (binary tensors, Triton's loose scalars), so their request bodies are declared here."""

from __future__ import annotations

from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.errors import error_responses
from trtserve.serve.kserve.protocol import GenerateInputs, InferRequest
from trtserve.serve.openapi import NOT_READY, inline_schema


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
KSERVE_READY = NOT_READY | error_responses(401, 404, 503, kserve=True)
KSERVE_GENERATE = error_responses(400, 401, 404, 413, 429, 501, 503, 504, kserve=True)
KSERVE_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "events"}}
KSERVE_INFER = {
    200: {
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "description": "JSON, or a JSON header and binary tensors when binary outputs were asked for",
    }
}

# The keyword arguments of each KServe route decorator.
SERVER = {"responses": error_responses(401, 503, kserve=True)}
METADATA = {"responses": error_responses(401, 404, 503, kserve=True)}
READY = {"responses": KSERVE_READY}
INFER = {"responses": KSERVE_INFER | KSERVE_GENERATE, "openapi_extra": INFER_BODY}
GENERATE = {"responses": KSERVE_GENERATE, "openapi_extra": GENERATE_BODY}
GENERATE_STREAM = {"responses": KSERVE_STREAM | KSERVE_GENERATE, "openapi_extra": GENERATE_BODY}
