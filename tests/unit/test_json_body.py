"""Request bodies take the JSON types /openapi.json states (serve/json_body.py): what pydantic's lax
mode would convert (0 for a boolean, false or "3" for an integer, true or "1.5" for a number) is
refused, and every field of every body is tried, so a body that loses the check fails here. The
schemathesis findings (seed 24680) are the first cases; real JSON values still pass."""

from __future__ import annotations

import types
import typing

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from trtserve.serve.adapters import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest
from trtserve.serve.batch.protocol import BatchCreate
from trtserve.serve.kserve.protocol import GenerateInputs, InferInput, InferRequest, generate_inputs
from trtserve.serve.openai.embeddings_protocol import EmbeddingRequest
from trtserve.serve.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    StreamOptions,
    TokenizeRequest,
)
from trtserve.serve.openai.tools import FunctionDef
from trtserve.serve.openapi import inline_schema
from trtserve.serve.receipts.routes import InvalidateRequest, ReplayRequest
from trtserve.serve.repository.admin import CanaryBody, IndexBody, VersionsBody
from trtserve.serve.responses.protocol import ResponsesRequest, TextFormatJsonSchema

# Every model a route parses a body into (nested ones through their parents' fields).
BODIES = [
    CompletionRequest,
    ChatCompletionRequest,
    TokenizeRequest,
    DetokenizeRequest,
    StreamOptions,
    FunctionDef,
    EmbeddingRequest,
    ResponsesRequest,
    TextFormatJsonSchema,
    BatchCreate,
    GenerateInputs,
    InferRequest,
    InferInput,
    IndexBody,
    VersionsBody,
    CanaryBody,
    LoadLoRAAdapterRequest,
    UnloadLoRAAdapterRequest,
    InvalidateRequest,
    ReplayRequest,
]
# What lax mode takes for each JSON type, and the schema does not.
LAX = {bool: [0, 1, "true", "yes"], int: [False, True, "3"], float: [True, "1.5"]}


def _scalar(annotation) -> type | None:
    """bool, int or float when the field is one of those (or it or null)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else None
    return annotation if annotation in LAX else None


SCALARS = [
    (model, name, value)
    for model in BODIES
    for name, field in model.model_fields.items()
    if (kind := _scalar(field.annotation)) is not None
    for value in LAX[kind]
]


def _refuses(model: type[BaseModel], body: dict, field: str) -> bool:
    try:
        model.model_validate(body)
    except ValidationError as err:
        return any(e["loc"][:1] == (field,) for e in err.errors())
    return False


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (TokenizeRequest, "add_generation_prompt", 0),  # /tokenize
        (IndexBody, "ready", 0),  # /v2/repository/index
        (InvalidateRequest, "before_version", False),  # /v1/cache/invalidate
        (DetokenizeRequest, "tokens", ["3"]),  # /detokenize
        (DetokenizeRequest, "tokens", [True]),
        (CompletionRequest, "logit_bias", {"12": True}),
        (CompletionRequest, "stop_token_ids", [False]),
        (VersionsBody, "versions", [True]),
        (InferInput, "shape", [True]),
    ],
)
def test_what_the_fuzz_found_is_refused(model, field, value):
    assert _refuses(model, {field: value}, field)
    assert not jsonschema.Draft202012Validator(inline_schema(model)).is_valid({field: value})


@pytest.mark.parametrize(("model", "field", "value"), SCALARS, ids=[f"{m.__name__}.{f}={v!r}" for m, f, v in SCALARS])
def test_every_scalar_field_refuses_what_lax_mode_converts(model, field, value):
    assert _refuses(model, {field: value}, field), f"{model.__name__}.{field} took {value!r}"


def test_real_json_values_pass():
    hi = [{"role": "user", "content": "hi"}]
    CompletionRequest.model_validate({"prompt": [1, 2.0], "max_tokens": 4.0, "temperature": 1, "echo": False})
    ChatCompletionRequest.model_validate({"messages": hi, "logprobs": True, "top_logprobs": 2, "seed": 7})
    TokenizeRequest.model_validate({"messages": hi, "add_generation_prompt": False, "add_special_tokens": True})
    IndexBody.model_validate({"ready": True, "other": 0})  # Triton's other keys stay ignored
    InvalidateRequest.model_validate({"namespace": "n", "before_version": 3})
    CanaryBody.model_validate({"version": 2, "weight": 0.1, "window": 20})
    # KServe: scalars as 1-element lists, and stop_words as a string, which its own validator reads
    inputs = generate_inputs({"max_tokens": [8], "stream": [True], "temperature": [0.5], "stop_words": "x"})
    assert (inputs.max_tokens, inputs.stream, inputs.stop_words) == (8, True, ["x"])


def test_the_error_names_the_field_and_the_type():
    with pytest.raises(ValidationError) as e:
        ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi", "name": 1}], "n": "2"})
    found = {tuple(x["loc"]): x["msg"] for x in e.value.errors()}
    assert found == {("n",): "must be an integer"}  # the body's own fields come first
