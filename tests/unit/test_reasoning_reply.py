"""The reply split the front ends share (serve/openai/reply.py) and the Responses items it builds
(serve/responses/output.py): the same message, deltas and items however the text is chunked, the
parsers a template implies, and the settings that name parsers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtserve.engine.errors import UserError
from trtserve.serve.config import load_serve_config
from trtserve.serve.openai.reply import ReplyPlan, template_kwargs
from trtserve.serve.openai.tools import Tool, ToolPlan
from trtserve.serve.responses.output import Events, OutputBuilder

TOOLS = [Tool.model_validate({"function": {"name": "get_weather"}})]
QWEN3 = '<think>\nCheck it.\n</think>\n\nOne moment. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
GPT_OSS = (
    "<|channel|>analysis<|message|>Check it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather"
    ' <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
CASES = [("think", "hermes", QWEN3, "One moment. "), ("harmony", "harmony", GPT_OSS, "")]


def _plan(reasoning: str, tools: str) -> ReplyPlan:
    return ReplyPlan(ToolPlan(TOOLS, "auto", None, parser=tools), reasoning, starts_inside=False)


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@pytest.mark.parametrize("reasoning, tools, text, content", CASES)
@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=10))
def test_chat_deltas_concatenate_to_the_message(reasoning, tools, text, content, cuts):
    plan = _plan(reasoning, tools)
    whole = plan.stream().message(text)
    assert (whole["reasoning_content"], whole["content"]) == ("Check it.", content or None)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})
    ]
    split, pieces = plan.stream(), _pieces(text, cuts)
    deltas = [split.delta(p, final=i == len(pieces) - 1) for i, p in enumerate(pieces)]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == whole["reasoning_content"]
    assert "".join(d.get("content", "") for d in deltas) == (whole["content"] or "")
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert [c["function"].get("name") for c in calls if "id" in c] == ["get_weather"]
    assert "".join(c["function"]["arguments"] for c in calls) == whole["tool_calls"][0]["function"]["arguments"]


@pytest.mark.parametrize("reasoning, tools, text, content", CASES)
@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=10))
def test_responses_items_are_the_same_streamed(reasoning, tools, text, content, cuts):
    whole = OutputBuilder(_plan(reasoning, tools), Events())
    whole.feed(text, final=True)
    streamed, pieces = OutputBuilder(_plan(reasoning, tools), Events()), _pieces(text, cuts)
    events = [e for i, p in enumerate(pieces) for e in streamed.feed(p, final=i == len(pieces) - 1)]

    def strip(items):
        return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in items]

    assert strip(streamed.items) == strip(whole.items)
    assert [i["type"] for i in whole.items] == ["reasoning"] + (["message"] if content else []) + ["function_call"]
    text_deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert text_deltas == whole.items[0]["content"][0]["text"] == "Check it."


def test_template_kwargs_merge_and_refuse_reserved_names():
    assert template_kwargs({"enable_thinking": False}, {"x": 1}, "low") == {
        "enable_thinking": False,
        "x": 1,
        "reasoning_effort": "low",
    }
    assert template_kwargs({"enable_thinking": False}, {"enable_thinking": True}, None) == {"enable_thinking": True}
    with pytest.raises(Exception, match="may not set add_generation_prompt"):
        template_kwargs({}, {"add_generation_prompt": False}, None)


def test_parser_settings_name_known_parsers():
    cfg = load_serve_config(None, {"reasoning_parser": "deepseek_r1", "tool_call_parser": "qwen3_coder"})
    assert (cfg.reasoning_parser, cfg.tool_call_parser) == ("deepseek_r1", "qwen3_coder")
    with pytest.raises(UserError, match="unknown reasoning_parser 'nope'"):
        load_serve_config(None, {"reasoning_parser": "nope"})
    with pytest.raises(UserError, match="unknown tool_call_parser"):
        load_serve_config(None, {"tool_call_parser": "xml"})
