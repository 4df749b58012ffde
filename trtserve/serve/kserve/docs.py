"""What /openapi.json says of the KServe routes beyond what FastAPI infers: they read their bodies
themselves (binary tensors, Triton's loose scalars), so their request bodies are declared here."""

from __future__ import annotations

from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.errors import error_responses
from trtserve.serve.kserve.infer import OPTIONAL_INPUTS, OUTPUTS
from trtserve.serve.kserve.protocol import GenerateInputs, InferRequest
from trtserve.serve.openapi import MODEL_READY, inline_schema


def _loose(prop: dict) -> dict:
    """Triton's loose scalars: a value, or a list of that one value."""
    return {"anyOf": [prop, {"type": "array", "minItems": 1, "maxItems": 1, "items": prop}]}


def _inputs() -> dict:
    """GenerateInputs' properties as the server reads them (serve/kserve/protocol.py)."""
    props = inline_schema(GenerateInputs)["properties"]
    words = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    out = {k: words if k in ("stop_words", "bad_words") else _loose(v) for k, v in props.items()}
    for key in ("return_context_logits", "return_generation_logits"):
        out[key] = _loose({"const": False, "description": "Not supported: only false is accepted."})
    out["min_tokens"]["description"] = "At most max_tokens (a larger min_tokens is refused)."
    out["end_id"]["description"] = "-1 (no end token) or a token id below the model's vocabulary size."
    return out


_NULL = {"anyOf": [{"type": "null"}, {"const": [None]}]}  # null or [null]: both read as absent


def _present(field: str, schema: dict) -> dict:
    return {"required": [field], "properties": {field: schema}}


def _absent(field: str, schema: dict | None = None) -> dict:
    return {"properties": {field: {"anyOf": [_NULL, schema]} if schema else _NULL}}


# guided_decoding_guide needs a guide type, and every guide type but "json" needs a non-empty guide
# (which must compile: one that does not is a 400). As anyOf of plain alternatives, not if/then:
# schemathesis generates from the canonical form, which if/then made too large.
_GUIDE_RULES = [
    {
        "anyOf": [
            _absent("guided_decoding_guide"),
            _present("guided_decoding_guide_type", _loose({"enum": ["json", "json_schema", "regex", "ebnf_grammar"]})),
        ]
    },
    {
        "anyOf": [
            _absent("guided_decoding_guide_type", _loose({"const": "json"})),
            _present("guided_decoding_guide", _loose({"type": "string", "minLength": 1})),
        ]
    },
]
_TEXT = {"type": "string", "minLength": 1}
# binary_data_size places a tensor after the JSON header (application/octet-stream bodies only)
_TENSOR_PARAMETERS = {"type": "object", "not": {"required": ["binary_data_size"]}}


def _generate_schema(streams: bool) -> dict:
    """The Triton generate body: text_input, the ensemble's optional inputs as keys or under
    `parameters`, and the client's id. /generate refuses stream: true (generate_stream streams)."""
    inputs = _inputs()
    if not streams:
        inputs["stream"] = _loose({"const": False, "description": "true needs generate_stream"})
    props = dict(inputs)
    props["text_input"] = {"anyOf": [_TEXT, {"type": "array", "minItems": 1, "maxItems": 1, "items": _TEXT}]}
    props["id"] = {"type": "string", "maxLength": MAX_CLIENT_ID}
    props["parameters"] = {"type": "object", "properties": inputs, "additionalProperties": False}
    props["parameters"]["allOf"] = _GUIDE_RULES
    return {
        "type": "object",
        "properties": props,
        "required": ["text_input"],
        "additionalProperties": False,
        "allOf": _GUIDE_RULES,
    }


_FP32_MAX = 3.4028234663852886e38
_FP32_TINY = 1.401298464324817e-45  # the smallest positive FP32


def _tensor_value(prop: dict) -> dict:
    """A tensor element: the input's value schema without null (a tensor has no nulls)."""
    kinds = [k for k in prop.get("anyOf", [prop]) if k.get("type") != "null"]
    value = dict(kinds[0]) if len(kinds) == 1 else {"anyOf": kinds}
    if value.get("type") == "number":  # FP32: a larger value is infinite as a tensor, and refused
        value.setdefault("maximum", _FP32_MAX)
        value.setdefault("minimum", -_FP32_MAX)
        if value.pop("exclusiveMinimum", None) == 0:  # a smaller positive value is 0.0 as FP32
            value["minimum"] = _FP32_TINY
    return value


def _infer_schema() -> dict:
    """An infer request as JSON: the model's metadata (serve/kserve/infer.py) says each input's name
    and datatype; every input but text_input is one value; parameters are read like inputs, besides
    Triton's reserved ones."""
    inputs = _inputs()
    tensors = [
        {
            "type": "object",
            "properties": {
                "name": {"const": "text_input"},
                "datatype": {"const": "BYTES"},
                "shape": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}},
                "data": {"type": "array", "minItems": 1, "items": _TEXT},
                "parameters": _TENSOR_PARAMETERS,
            },
            "required": ["name", "datatype", "shape", "data"],
            "additionalProperties": False,
            "description": "The prompts; the shape's element count equals the number of strings in data.",
        }
    ]
    for name, datatype in OPTIONAL_INPUTS.items():
        value = {"type": "string"} if datatype == "BYTES" else _tensor_value(inputs[name]["anyOf"][0])
        tensors.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "datatype": {"const": datatype},
                    "shape": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"const": 1}},
                    "data": {"type": "array", "minItems": 1, "maxItems": 1, "items": value},
                    "parameters": _TENSOR_PARAMETERS,
                },
                "required": ["name", "datatype", "shape", "data"],
                "additionalProperties": False,
            }
        )
    reserved = {
        "timeout": {"type": "integer", "minimum": 1, "description": "This request's deadline, in microseconds."},
        "priority": {"type": "integer", "minimum": 0, "description": "1 is the highest, 0 the default."},
        "binary_data_output": {"type": "boolean"},
    }
    params = {k: v for k, v in inputs.items() if k not in ("timeout", "priority")} | reserved
    request = inline_schema(InferRequest)
    request["properties"]["inputs"] = {
        "type": "array",
        "minItems": 1,
        "items": {"oneOf": tensors},
        "contains": {"properties": {"name": {"const": "text_input"}}},
        "description": "text_input and any optional inputs, each at most once.",
    }
    request["properties"]["parameters"] = {
        "type": "object",
        "properties": params,
        "patternProperties": {"^triton_": {}},
        "additionalProperties": False,
        "allOf": _GUIDE_RULES,
    }
    request["properties"]["outputs"] = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"name": {"enum": list(OUTPUTS)}, "parameters": {"type": "object"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    }
    request["description"] = (
        "An LLM's infer request, as below. A tensor model (docs/tensor-models.md) takes the inputs and outputs "
        "its metadata (GET /v2/models/{model}) lists, in JSON or binary tensors, and an output's "
        '"classification" parameter; its body is checked against that metadata, not this schema.'
    )
    return request


def _body(schema: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


INFER_BODY = _body(_infer_schema())
GENERATE_BODY = _body(_generate_schema(streams=False))
STREAM_BODY = _body(_generate_schema(streams=True))
KSERVE_READY = error_responses(401, 404, 503, kserve=True) | MODEL_READY
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
GENERATE_STREAM = {"responses": KSERVE_STREAM | KSERVE_GENERATE, "openapi_extra": STREAM_BODY}
