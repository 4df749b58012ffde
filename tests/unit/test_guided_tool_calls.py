"""Tool-call parsers (text/tool_calls.py) and the tool plan (serve/openai/tools.py): fed piece by
piece they give what they give for the whole text, and `required` builds the schema it promises."""

from __future__ import annotations

import json

import jsonschema
import pytest

from trtserve.serve.openai.tools import Tool, ToolPlan
from trtserve.text.tool_calls import PARSERS, family_of_template

HERMES = 'Sure. <tool_call>\n{"name": "f", "arguments": {"a": 1, "s": "x</tool"}}\n</tool_call> and <tool_call>{"name": "g", "arguments": {}}</tool_call>'


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize(
    "family, text, content, calls",
    [
        ("hermes", HERMES, "Sure.  and ", [("f", {"a": 1, "s": "x</tool"}), ("g", {})]),
        ("hermes", "no calls, only <tool text", "no calls, only <tool text", []),
        ("hermes", 'x <tool_call>{"name": "f", "arguments": {"b": [1]}}', "x ", [("f", {"b": [1]})]),  # EOS, no tag
        ("hermes", "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
        (
            "llama3_json",
            '<|python_tag|>{"name": "f", "parameters": {"q": "a;b"}}; {"name": "g", "parameters": {}}',
            "",
            [("f", {"q": "a;b"}), ("g", {})],
        ),
        ("llama3_json", "Hello {not a call}", "Hello {not a call}", []),
        ("json_array", '[{"name": "f", "arguments": {"x": 2}}]', "", [("f", {"x": 2})]),
    ],
)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_fed_in_pieces_equals_whole(family, text, content, calls, size):
    parser = PARSERS[family]()
    shown, deltas = "", []
    for piece in _pieces(text, size):
        c, d = parser.feed(piece)
        shown, deltas = shown + c, deltas + d
    c, d = parser.finish()
    shown, deltas = shown + c, deltas + d
    assert shown == content
    assert [(x.name, json.loads(x.arguments)) for x in parser.calls] == calls
    # each call streams as a header (its name, no arguments) then its arguments
    assert [(d.index, d.name) for d in deltas if d.name] == [(i, n) for i, (n, _) in enumerate(calls)]
    for i, (_, args) in enumerate(calls):
        assert json.loads("".join(d.arguments for d in deltas if d.index == i)) == args
    assert PARSERS[family]().parse(text) == (content, parser.calls)


def test_family_follows_the_template():
    assert family_of_template("{{ '<|python_tag|>' }}") == "llama3_json"
    assert family_of_template("<tool_call>") == family_of_template(None) == "hermes"


def test_required_constrains_to_an_array_of_calls_with_each_functions_schema():
    tools = [
        Tool.model_validate(
            {
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                }
            }
        ),
        Tool.model_validate({"function": {"name": "g"}}),
    ]
    schema = json.loads(ToolPlan(tools, "required", None).guided().spec)
    jsonschema.validate([{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}], schema)
    for bad in ([], [{"name": "f", "arguments": {"a": "x"}}], [{"name": "h", "arguments": {}}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    single = json.loads(ToolPlan(tools, "required", None, parallel=False).guided().spec)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "g", "arguments": {}}] * 2, single)
    assert ToolPlan(tools, "auto", None).guided() is None and ToolPlan(tools, None, None).mode == "auto"
    assert ToolPlan(None, None, None).mode == "none"


def test_hermes_arguments_stream_as_they_are_written():
    parser = PARSERS["hermes"]()
    pieces = ['<tool_call>{"name": "f", "argu', 'ments": {"city": "Pa', 'ris", "days"', ": 3}}</tool", "_call>"]
    got = [parser.feed(p)[1] for p in pieces]
    assert [[(d.name, d.arguments) for d in ds] for ds in got] == [
        [],
        [("f", ""), (None, '{"city": "Pa')],
        [(None, 'ris", "days"')],
        [(None, ": 3}")],  # the call's closing brace and the partial tag are held back
        [],
    ]
    assert parser.calls[0].arguments == '{"city": "Paris", "days": 3}'
