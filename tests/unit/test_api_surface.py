"""Model-free checks of issue 38's validation and schema rules: min_tokens within max_tokens, the
KServe datatype check (HTTP and gRPC decoding), 405 with Allow, and /openapi.json's request
schemas agreeing with what the server accepts."""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.testclient import TestClient

from trtserve.engine.errors import UserError
from trtserve.serve.batch.protocol import BatchCreate
from trtserve.serve.errors import APIError, install_handlers
from trtserve.serve.kserve.infer import infer_call
from trtserve.serve.kserve.protocol import generate_inputs
from trtserve.serve.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from trtserve.serve.openapi import inline_schema

HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (CompletionRequest, {"prompt": "x", "max_tokens": 4, "min_tokens": 5}),
        (ChatCompletionRequest, {"messages": HI, "max_tokens": 4, "min_tokens": 5}),
        (ChatCompletionRequest, {"messages": HI, "max_completion_tokens": 4, "min_tokens": 5}),
    ],
)
def test_min_tokens_over_max_tokens_names_both(model, body):
    with pytest.raises(ValidationError, match=r"min_tokens \(5\) exceeds max_tokens \(4\)"):
        model.model_validate(body)
    model.model_validate(body | {"min_tokens": 4})  # equal is fine


def test_min_tokens_over_the_rest_of_the_context_is_a_user_error():
    body = CompletionRequest.model_validate({"prompt": "x", "min_tokens": 300})  # max_tokens unset
    with pytest.raises(UserError, match=r"min_tokens \(300\) exceeds max_tokens \(250\)"):
        body.sampling_params(250, None)
    assert body.sampling_params(300, None).min_tokens == 300


def test_kserve_min_tokens_over_max_tokens_names_both():
    with pytest.raises(APIError) as e:
        generate_inputs({"max_tokens": 4, "min_tokens": [9]})
    assert e.value.status == 400 and e.value.message.startswith("min_tokens (9) exceeds max_tokens (4)")
    assert generate_inputs({"min_tokens": 16}).min_tokens == 16  # max_tokens defaults to 16


def _text(dtype, value) -> np.ndarray:
    return np.array([value], dtype=dtype)


@pytest.mark.parametrize(
    ("name", "arr", "got", "want"),
    [
        ("text_input", _text(np.float64, 1.5), "FP64", "BYTES"),
        ("text_input", _text(np.int32, 7), "INT32", "BYTES"),
        ("max_tokens", _text(np.int64, 4), "INT64", "INT32"),
        ("temperature", _text(np.float64, 0.5), "FP64", "FP32"),
        ("stream", _text(np.int32, 1), "INT32", "BOOL"),
    ],
)
def test_a_datatype_other_than_the_metadata_is_refused_with_tritons_words(name, arr, got, want):
    tensors = {"text_input": _text(np.object_, b"hi"), name: arr}
    with pytest.raises(APIError) as e:
        infer_call(tensors, {}, None, "m")
    assert e.value.status == 400
    assert e.value.message == f"inference input '{name}' data-type is '{got}', but model 'm' expects '{want}'"


def test_matching_datatypes_pass_and_unknown_inputs_keep_their_own_error():
    ok = {"text_input": _text(np.object_, b"hi"), "max_tokens": _text(np.int32, 4), "stream": _text(np.bool_, False)}
    assert infer_call(ok, {}, None, "m").inputs.max_tokens == 4
    with pytest.raises(APIError, match="wat: unknown input or parameter"):
        infer_call({**ok, "wat": _text(np.float64, 1.0)}, {}, None, "m")


def test_grpc_tensors_are_checked_the_same_way():
    from tritonclient.grpc import service_pb2 as pb

    from trtserve.serve.grpc.tensors import request_tensors

    req = pb.ModelInferRequest(model_name="m")
    req.inputs.add(name="text_input", datatype="FP64", shape=[1]).contents.fp64_contents.append(1.5)
    with pytest.raises(APIError, match="'text_input' data-type is 'FP64', but model 'm' expects 'BYTES'"):
        infer_call(request_tensors(req), {}, None, "m")


def test_405_lists_every_method_of_the_path():
    app = FastAPI()
    install_handlers(app)
    app.get("/things/{tid}")(lambda tid: {})
    app.delete("/things/{tid}")(lambda tid: {})
    app.post("/make")(lambda: {})
    with TestClient(app) as c:
        r = c.put("/things/1")
        assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET"
        assert r.json()["error"]["message"] == "method PUT not allowed on /things/1; use DELETE or GET"
        r = c.get("/make")
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        assert c.get("/nowhere").status_code == 404 and "allow" not in c.get("/nowhere").headers


def _agree(model, body: dict) -> tuple[bool, bool]:
    """(does the server's model accept it, does its /openapi.json schema)."""
    try:
        model.model_validate(body)
        accepted = True
    except (ValidationError, ValueError):
        accepted = False
    return accepted, jsonschema.Draft202012Validator(inline_schema(model)).is_valid(body)


CASES = [
    (CompletionRequest, {"prompt": "x"}, True),
    (CompletionRequest, {"prompt": ""}, False),
    (CompletionRequest, {"prompt": []}, False),
    (CompletionRequest, {"prompt": [[1], []]}, False),
    (CompletionRequest, {"prompt": [-1]}, False),
    (CompletionRequest, {"prompt": [True]}, False),
    (CompletionRequest, {"prompt": "x", "stop": ""}, False),
    (CompletionRequest, {"prompt": "x", "stop": ["a"] * 17}, False),
    (CompletionRequest, {"prompt": "x", "logit_bias": {"12": 5}}, True),
    (CompletionRequest, {"prompt": "x", "logit_bias": {"x": 5}}, False),
    (CompletionRequest, {"prompt": "x", "logit_bias": {"12": 101}}, False),
    (CompletionRequest, {"prompt": "x", "logit_bias": {"2147483648": 1}}, False),
    (CompletionRequest, {"prompt": "x", "guided_regex": "a", "guided_json": {}}, False),
    (CompletionRequest, {"prompt": "x", "guided_regex": "a", "response_format": {"type": "text"}}, True),
    (CompletionRequest, {"prompt": "x", "guided_regex": "a", "response_format": {"type": "json_object"}}, False),
    (CompletionRequest, {"prompt": "x", "response_format": {"type": "json_schema"}}, False),
    (CompletionRequest, {"prompt": "x", "response_format": {"type": "text", "json_schema": {"name": "a"}}}, False),
    (ChatCompletionRequest, {"messages": HI, "top_logprobs": 2}, False),
    (ChatCompletionRequest, {"messages": HI, "top_logprobs": 2, "logprobs": False}, False),
    (ChatCompletionRequest, {"messages": HI, "top_logprobs": 2, "logprobs": True}, True),
    (ChatCompletionRequest, {"messages": HI, "top_logprobs": None}, True),
    (ChatCompletionRequest, {"messages": []}, False),
    (ChatCompletionRequest, {"messages": HI, "tool_choice": "auto"}, False),
    (ChatCompletionRequest, {"messages": HI, "tool_choice": "none"}, True),
    (
        ChatCompletionRequest,
        {"messages": HI, "tools": [{"function": {"name": "f"}}], "tool_choice": "required", "guided_regex": "a"},
        False,
    ),
    (ChatCompletionRequest, {"messages": HI, "tools": [{"function": {"name": "f"}}], "guided_regex": "a"}, True),
    (TokenizeRequest, {}, False),
    (TokenizeRequest, {"prompt": "a"}, True),
    (TokenizeRequest, {"prompt": "a", "messages": HI}, False),
    (TokenizeRequest, {"messages": []}, False),
    (TokenizeRequest, {"prompt": None, "messages": HI}, False),
    (DetokenizeRequest, {"tokens": [1, 2.0]}, True),
    (DetokenizeRequest, {"tokens": ["3"]}, False),
    (DetokenizeRequest, {"tokens": [True]}, False),
    (DetokenizeRequest, {"tokens": [1], "extra": 1}, False),
    (BatchCreate, {"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "24h"}, True),
    (BatchCreate, {"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "7d"}, True),
    (BatchCreate, {"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "8d"}, False),
    (BatchCreate, {"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "0h"}, False),
    (BatchCreate, {"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "24"}, False),
]


@pytest.mark.parametrize(
    ("model", "body", "valid"), CASES, ids=[f"{m.__name__}-{i}" for i, (m, _, _) in enumerate(CASES)]
)
def test_the_schema_says_what_the_server_accepts(model, body, valid):
    accepted, schema_valid = _agree(model, body)
    assert (accepted, schema_valid) == (valid, valid)
