"""One request-options value end to end (engine/request_options.py): built once by the front end that
parsed the request, carried unchanged into the engine's Request, never copied field by field."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.runtime.request import Request
from trtserve.serve.kserve.protocol import GenerateInputs
from trtserve.serve.openai.protocol import ChatCompletionRequest, CompletionRequest
from trtserve.serve.request_fields import RequestOptionFields
from trtserve.serve.responses.protocol import ResponsesRequest

ROOT = Path(__file__).resolve().parents[2] / "trtserve"
OPTIONS = {f.name for f in dataclasses.fields(RequestOptions)}


def test_no_message_repeats_an_option_field():
    """GenerateRequest and the engine's Request hold the options value, not copies of its fields."""
    for holder in (GenerateRequest, Request):
        names = {f.name for f in dataclasses.fields(holder)}
        assert "options" in names
        assert not names & OPTIONS, f"{holder.__name__} copies {sorted(names & OPTIONS)}"


def _calls(names: set[str]):
    """(path, call) for every call in trtserve to a function or method named in `names`."""
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) in names:
                    yield path.relative_to(ROOT), node


def _base(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_no_code_copies_an_option_by_hand():
    """No request's options are rebuilt from another request's fields (`cache_namespace=parent.cache_namespace`,
    as the engine once did for forked sequences): the value travels whole. A new per-request field then
    touches RequestOptions, the front ends' RequestOptionFields and the code that reads it."""
    requests = {"req", "request", "r", "parent", "child", "run", "body", "g"}
    copies = [
        f"{path}:{call.lineno} {k.arg}"
        for path, call in _calls({"RequestOptions", "GenerateRequest", "Request", "replace", "start"})
        for k in call.keywords
        if k.arg in OPTIONS
        and isinstance(k.value, ast.Attribute)
        and k.value.attr == k.arg
        and _base(k.value) in requests
    ]
    assert not copies, copies


def test_nothing_builds_a_request_from_loose_option_fields():
    """GenerateRequest takes the options value; no caller spreads option keywords into it."""
    bad = [
        f"{path}:{call.lineno}"
        for path, call in _calls({"GenerateRequest", "Request"})
        for k in call.keywords
        if k.arg in OPTIONS
    ]
    assert not bad, bad


@pytest.mark.parametrize("model", [CompletionRequest, ChatCompletionRequest, GenerateInputs, ResponsesRequest])
def test_every_front_end_parses_the_options_the_same_way(model):
    assert issubclass(model, RequestOptionFields)
    required = {"model": "m", "prompt": "x", "messages": [{"role": "user", "content": "x"}], "input": "x"}
    body = {k: v for k, v in required.items() if k in model.model_fields}
    body |= {"priority": 2.5, "cache_salt": "s", "cache_namespace": "docs", "context_version": 7, "speculate": False}
    options = model.model_validate(body).request_options(client_id="c")
    assert options == RequestOptions(
        priority=2.5, cache_salt="s", cache_namespace="docs", context_version=7, speculate=False, client_id="c"
    )


def test_the_value_is_frozen_and_checks_itself():
    o = RequestOptions(priority=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.priority = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        RequestOptions(1.0)  # type: ignore[misc]  # keyword-built only
    for bad in ({"priority": float("inf")}, {"cache_namespace": ""}, {"context_version": -1}):
        with pytest.raises(UserError):
            RequestOptions(**bad)
