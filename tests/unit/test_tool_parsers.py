"""Every tool-call parser (text/tool_parsers.py) gives the same content and calls however the model's
text is chunked: in one piece, one character at a time, and split anywhere (hypothesis); a call cut
short is never sent, and the complete calls before it are kept."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtserve.text.tool_parsers import new_tool_parser, tool_parser_of_template

HERMES = 'Sure. <tool_call>\n{"name": "f", "arguments": {"a": 1, "s": "x</tool"}}\n</tool_call> then <tool_call>{"name": "g", "arguments": {}}</tool_call>'
QWEN3_CODER = (
    "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
    "<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"
)
HARMONY = (
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris", "days": 3}<|call|><|start|>assistant<|channel|>commentary to=functions.get_time'
    ' <|constrain|>json<|message|>{"zone": "CET"}<|call|>'
)
DEEPSEEK_V3 = (
    "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    '{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>'
    '{"zone": "CET"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
WEATHER = ("get_weather", {"city": "Paris", "days": 3})
TIME = ("get_time", {"zone": "CET"})
SCHEMAS = {"get_time": {"properties": {"zone": {"type": "string"}}}}

# parser, model text, content, calls
CASES = [
    ("hermes", HERMES, "Sure.  then ", [("f", {"a": 1, "s": "x</tool"}), ("g", {})]),
    ("hermes", "plain <tool text", "plain <tool text", []),
    ("qwen3_coder", QWEN3_CODER, "Let me look.\n\n", [WEATHER, TIME]),
    (
        "llama3_json",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; '
        '{"name": "get_time", "parameters": {"zone": "CET"}}',
        "",
        [WEATHER, TIME],
    ),
    ("llama3_json", "Hello {not a call}", "Hello {not a call}", []),
    ("pythonic", '[get_weather(city="Paris", days=3), get_time(zone="CET")]', "", [WEATHER, TIME]),
    ("pythonic", "[1, 2] are numbers", "[1, 2] are numbers", []),
    (
        "mistral",
        'Ok.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
        "Ok.",
        [WEATHER],
    ),
    (
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[ARGS]{"zone": "CET"}',
        "",
        [WEATHER, TIME],
    ),
    ("harmony", HARMONY, "", [WEATHER, TIME]),
    ("harmony", "<|channel|>final<|message|>Just text.<|return|>", "Just text.", []),
    ("deepseek_v3", DEEPSEEK_V3, "Checking.", [WEATHER, TIME]),
    (
        "json_array",
        '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
        '{"name": "get_time", "arguments": {"zone": "CET"}}]',
        "",
        [WEATHER, TIME],
    ),
]


def run(name: str, pieces: list[str]) -> tuple[str, list, list]:
    """(content, calls as (name, args), deltas) of the text fed in these pieces."""
    parser = new_tool_parser(name, SCHEMAS)
    content, deltas = "", []
    for piece in pieces:
        c, d = parser.feed(piece)
        content, deltas = content + c, deltas + d
    c, d = parser.finish()
    return content + c, [(x.name, json.loads(x.arguments)) for x in parser.calls], deltas + d


def streamed_calls(deltas) -> list:
    """The calls as a streaming client assembles them from the deltas."""
    calls: dict[int, list] = {}
    for d in deltas:
        if d.name is not None:
            assert d.index == len(calls), "calls keep their order and indices"
            calls[d.index] = [d.name, ""]
        calls[d.index][1] += d.arguments
    return [(n, json.loads(a)) for n, a in calls.values()]


@pytest.mark.parametrize("name, text, content, calls", CASES)
def test_whole_and_one_character_at_a_time(name, text, content, calls):
    for pieces in ([text], list(text)):
        got_content, got_calls, deltas = run(name, pieces)
        assert (got_content, got_calls) == (content, calls)
        assert streamed_calls(deltas) == calls


@pytest.mark.parametrize("name, text, content, calls", CASES)
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_chunking_gives_the_same_answer(name, text, content, calls, cuts):
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    got_content, got_calls, deltas = run(name, pieces)
    assert (got_content, got_calls) == (content, calls)
    assert streamed_calls(deltas) == calls


@pytest.mark.parametrize("name, text, content, calls", [c for c in CASES if len(c[3]) == 2])
def test_a_reply_cut_anywhere_sends_only_complete_calls(name, text, content, calls):
    """Every prefix (what max_tokens may leave): only calls whose JSON is whole, and a prefix of the calls."""
    for n in range(len(text) + 1):
        _, got, deltas = run(name, [text[:n]])
        assert got == calls[: len(got)]
        assert streamed_calls(deltas) == got
    assert run(name, [text])[1] == calls


def test_parser_follows_the_template():
    assert tool_parser_of_template(None) == "hermes"
    assert tool_parser_of_template("{{ '<tool_call>' }}") == "hermes"
    assert tool_parser_of_template("<tool_call>\n<function=") == "qwen3_coder"
    assert tool_parser_of_template("<|start|>{{ '<|channel|>' }}") == "harmony"
    assert tool_parser_of_template("[TOOL_CALLS]") == "mistral"
    assert tool_parser_of_template("<|python_tag|>") == "llama3_json"
    assert tool_parser_of_template("<｜tool▁calls▁begin｜>") == "deepseek_v3"
