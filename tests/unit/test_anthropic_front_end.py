"""The Anthropic front end without a model: the content blocks and stream events a reply builds
(the same however its text is chunked; every delta to an open block of its type), the request's
checks and its chat form, pings while a source is silent, and the edge's key and error rewriting."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from trtserve.serve.anthropic.blocks import BlockBuilder, signature
from trtserve.serve.anthropic.conversation import as_chat
from trtserve.serve.anthropic.errors import AnthropicEdge, error_type
from trtserve.serve.anthropic.protocol import CountTokensRequest, MessagesRequest
from trtserve.serve.anthropic.serving import with_pings
from trtserve.serve.anthropic.split import Splitter
from trtserve.serve.openai.reply import ReplyPlan
from trtserve.serve.openai.tools import Tool, ToolPlan

TOOLS = [Tool.model_validate({"function": {"name": "get_weather"}})]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
QWEN3 = f"<think>\nCheck it.\n</think>\n\nOne moment. {CALL}{CALL}"
DELTAS = {"text": {"text_delta"}, "thinking": {"thinking_delta", "signature_delta"}, "tool_use": {"input_json_delta"}}


def _builder(**kw) -> BlockBuilder:
    plan = ReplyPlan(ToolPlan(TOOLS, "auto", None, parser="hermes"), "think", starts_inside=False)
    return BlockBuilder(Splitter(plan), **kw)


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def _replay(events: list[dict]) -> list[dict]:
    """The blocks a client assembles from the events, checking each targets the open block."""
    blocks: list[dict] = []
    partial: dict[int, str] = {}
    open_index = None
    for e in events:
        if e["type"] == "content_block_start":
            assert open_index is None and e["index"] == len(blocks)
            blocks.append(dict(e["content_block"]))
            open_index = e["index"]
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_index
            block, d = blocks[open_index], e["delta"]
            assert d["type"] in DELTAS[block["type"]]
            if d["type"] == "input_json_delta":
                partial[open_index] = partial.get(open_index, "") + d["partial_json"]
            else:
                key = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}[d["type"]]
                block[key] = block[key] + d[key] if key != "signature" else d[key]
        else:
            assert e["type"] == "content_block_stop" and e["index"] == open_index
            if open_index in partial:
                blocks[open_index]["input"] = json.loads(partial[open_index])
            open_index = None
    assert open_index is None
    return blocks


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=12))
def test_streamed_blocks_equal_the_whole_reply_however_chunked(cuts):
    whole = _builder()
    whole.feed(QWEN3, final=True)
    streamed, events = _builder(), []
    for piece in _pieces(QWEN3, cuts):
        events += streamed.feed(piece, final=False)
    events += streamed.feed("", final=True)
    strip = [{k: v for k, v in b.items() if k != "id"} for b in whole.blocks]
    assert [{k: v for k, v in b.items() if k != "id"} for b in _replay(events)] == strip
    assert [{k: v for k, v in b.items() if k != "id"} for b in streamed.blocks] == strip
    assert [b["type"] for b in whole.blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert whole.blocks[0] == {"type": "thinking", "thinking": "Check it.", "signature": signature("Check it.")}
    assert whole.blocks[2]["input"] == {"city": "Paris"} and whole.has_calls


def test_no_parallel_keeps_the_first_call_and_omitted_thinking_keeps_only_its_signature():
    b = _builder(parallel=False, omit_thinking=True)
    events = b.feed(QWEN3, final=True)
    assert [x["type"] for x in b.blocks] == ["thinking", "text", "tool_use"]
    assert b.blocks[0] == {"type": "thinking", "thinking": "", "signature": signature("Check it.")}
    assert not any(e["type"] == "content_block_delta" and e["delta"]["type"] == "thinking_delta" for e in events)


def _request(**kw) -> dict:
    return {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}], **kw}


def test_tool_results_become_tool_messages_in_order():
    req = MessagesRequest.model_validate(
        _request(
            system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            messages=[
                {"role": "user", "content": "Go"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "T", "signature": "s"},
                        {"type": "redacted_thinking", "data": "x"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Before."},
                        {"type": "tool_result", "tool_use_id": "t1", "content": "bad", "is_error": True},
                        {"type": "text", "text": "After."},
                    ],
                },
            ],
            tools=[{"name": "f", "input_schema": {"type": "object"}}],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            stop_sequences=["X"],
        )
    )
    chat = as_chat(req)
    got = [(m.role, m.text(), m.tool_call_id) for m in chat.messages]
    assert got == [
        ("system", "A\n\nB", None),
        ("user", "Go", None),
        ("assistant", "", None),
        ("user", "Before.", None),
        ("tool", "Error: bad", "t1"),
        ("user", "After.", None),
    ]
    assistant = chat.messages[2]
    assert assistant.reasoning_content == "T" and json.loads(assistant.tool_calls[0].function.arguments) == {"a": 1}
    assert (chat.tool_choice, chat.parallel_tool_calls, chat.stop, chat.max_tokens) == ("required", False, ["X"], 50)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (_request(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]), "not supported yet"),
        (_request(messages=[{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]), "take"),
        (_request(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]), "no earlier"),
        (_request(thinking={"type": "enabled", "budget_tokens": 50}), "at least 1024"),
        (_request(thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=1024), "below max_tokens"),
        (_request(tool_choice={"type": "tool", "name": "g"}, tools=[{"name": "f", "input_schema": {}}]), "not among"),
        (_request(tools=[{"type": "bash_20250124", "name": "bash"}]), "server tool"),
        (
            _request(output_config={"format": {"type": "json_schema", "schema": {}}}, guided_grammar="root ::= x"),
            "one of",
        ),
    ],
)
def test_bad_requests_name_the_field(body, says):
    with pytest.raises(ValidationError, match=says):
        MessagesRequest.model_validate(body)


def test_unknown_top_level_fields_are_ignored_and_thinking_sets_template_variables():
    req = CountTokensRequest.model_validate(
        _request(service_tier="auto", context_management={}, thinking={"type": "disabled"}, max_tokens=None)
    )
    assert req.template_vars() == {"enable_thinking": False} and not req.shows_thinking()
    asked = CountTokensRequest.model_validate(
        _request(thinking={"type": "enabled", "budget_tokens": 1024}, chat_template_kwargs={"enable_thinking": False})
    )
    assert asked.template_vars() == {"enable_thinking": False}  # the request's own variables win
    assert (asked.thinking_budget(), req.thinking_budget()) == (1024, 0)  # the engine's budget; disabled: 0
    adaptive = CountTokensRequest.model_validate(_request(thinking={"type": "adaptive"}))
    assert (
        adaptive.thinking_budget() is None and CountTokensRequest.model_validate(_request()).thinking_budget() is None
    )
    assert CountTokensRequest.model_validate(_request(output_config={"effort": "max"})).effort() == "high"


def test_pings_while_the_source_is_silent():
    async def slow():
        await asyncio.sleep(0.35)
        yield 1
        yield 2

    async def run():
        return [x async for x in with_pings(slow(), 0.1)]

    got = asyncio.run(run())
    assert got[-2:] == [1, 2] and set(got[:-2]) == {None} and len(got) >= 3


def test_the_edge_takes_x_api_key_and_rewrites_errors():
    seen = {}

    async def app(scope, receive, send):
        seen["headers"] = dict(scope["headers"])
        body = json.dumps({"error": {"message": "nope", "type": "x", "param": None, "code": 429}}).encode()
        await send({"type": "http.response.start", "status": 429, "headers": [(b"content-length", b"9")]})
        await send({"type": "http.response.body", "body": body})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/v1/messages", "headers": [(b"x-api-key", b"k")]}
    asyncio.run(AnthropicEdge(app)(scope, None, send))
    assert seen["headers"][b"authorization"] == b"Bearer k"
    assert json.loads(sent[1]["body"]) == {"type": "error", "error": {"type": "rate_limit_error", "message": "nope"}}
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(sent[1]["body"])).encode()
    assert (error_type(500), error_type(503), error_type(404)) == ("api_error", "overloaded_error", "not_found_error")
