"""The Anthropic Messages API (`/v1/messages`) with the official `anthropic` SDK against a live server
whose chat template thinks (`<think>`, Qwen3-style): the tiny random model is forced through known
text by `guided_grammar`, so thinking, text and tool_use blocks come from the same parsers as on the
OpenAI path. Greedy text equals chat completions; the stream's events build exactly the non-streamed
message; count_tokens equals usage; errors arrive as the SDK's exception types in Anthropic's shape.
The server has an API key, which the SDK sends as `x-api-key`."""

from __future__ import annotations

import uuid

import anthropic
import httpx
import jsonschema
import openai
import pytest

pytestmark = pytest.mark.timeout(300)

# Qwen3's shape (as tests/api/test_reasoning.py's): earlier reasoning rendered in assistant turns, and
# `enable_thinking: false` (what `thinking: {"type": "disabled"}` sets) closes an empty think block.
THINK_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{%- if m.get('reasoning_content') %}<think>\n{{ m['reasoning_content'] }}\n</think>\n\n{% endif %}"
    "{{ m['content'] or '' }}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
KEY = "sk-test-anthropic"
T = 60  # seconds: every client call's timeout
WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Lima"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [{"name": "get_weather", "description": "Forecast", "input_schema": WEATHER}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
THINK_THEN_CALL = (
    r'root ::= "<think>\nI should check the weather.\n</think>\n\nLet me check. <tool_call>{\"name\": '
    r'\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": " [1-7] "}}</tool_call>"'
)
BLOCK_DELTAS = {
    "text": {"text_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, faults, server_class):
    from helpers import make_hf_model

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    hf = make_hf_model(tmp_path_factory.mktemp("anthropic-hf"), "llama", max_position_embeddings=2048)
    (hf / "chat_template.jinja").write_text(THINK_TEMPLATE)
    engine = tmp_path_factory.mktemp("engines") / "tiny-anthropic"
    build_engine(BuildConfig(model=str(hf), tokens_per_block=16), engine, quiet=True)
    d = tmp_path_factory.mktemp("anthropic")
    f = faults("anthropic")
    s = server_class(engine, "--kv-cache-memory", "32MiB", "--api-key", KEY, log=d / "server.log", launcher=f.launcher)
    s.faults = f
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=T)


@pytest.fixture(scope="module")
def model(server) -> str:
    models = httpx.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=T).json()
    return models["data"][0]["id"]


def _salt() -> dict:
    """Greedy, with a cache salt of its own: the request shares no prefix-cache entry with any other."""
    return {"cache_salt": uuid.uuid4().hex, "temperature": 0}


def _checked(events) -> list:
    """The raw stream's events, checked as a client reads them: message_start first, then per block
    start, deltas of its own type, stop (indices from 0, consecutive, one block open at a time), then
    message_delta and message_stop; pings anywhere after message_start."""
    events = [e for e in events if e.type != "ping"]
    assert events[0].type == "message_start" and events[0].message.content == []
    assert [e.type for e in events[-2:]] == ["message_delta", "message_stop"]
    open_block, next_index = None, 0
    for e in events[1:-2]:
        if e.type == "content_block_start":
            assert open_block is None and e.index == next_index
            open_block, next_index = e.content_block.type, next_index + 1
        elif e.type == "content_block_delta":
            assert e.index == next_index - 1 and e.delta.type in BLOCK_DELTAS[open_block], (open_block, e)
        else:
            assert e.type == "content_block_stop" and e.index == next_index - 1 and open_block is not None
            open_block = None
    assert open_block is None
    return events


def _same(a: anthropic.types.Message, b: anthropic.types.Message) -> None:
    """Two messages equal but for their ids (a tool_use block's is new each time) and how much of the
    same prompt the prefix cache held (the earlier of them leaves it warmer for the later)."""

    def strip(m):
        d = m.model_dump(exclude={"id"})
        for block in d["content"]:
            block.pop("id", None) if block["type"] == "tool_use" else None
        usage = d["usage"]
        usage["input_tokens"] += usage.pop("cache_read_input_tokens")
        return d

    assert strip(a) == strip(b)


def test_greedy_text_equals_chat_completions(server, client, model):
    chat = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=T)
    body = {"chat_template_kwargs": {"enable_thinking": False}}
    c = chat.chat.completions.create(model=model, messages=ASK, max_tokens=12, temperature=0, extra_body=body)
    m = client.messages.create(  # temperature as older clients send it (today's SDK has no argument for it)
        model=model, messages=ASK, max_tokens=12, thinking={"type": "disabled"}, extra_body={"temperature": 0}
    )
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert "".join(b.text for b in m.content if b.type == "text") == c.choices[0].message.content
    assert m.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[c.choices[0].finish_reason]
    assert m.usage.output_tokens == c.usage.completion_tokens
    # the same prompt, much of it read from the prefix cache the chat request left
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == c.usage.prompt_tokens
    assert m.usage.cache_read_input_tokens > 0 and m.usage.cache_creation_input_tokens == 0


def test_stream_equals_non_stream(client, model):
    kw = dict(model=model, messages=ASK, max_tokens=16, system=[{"type": "text", "text": "Be brief."}])
    whole = client.messages.create(**kw, extra_body=_salt())
    events = _checked(list(client.messages.create(**kw, stream=True, extra_body=_salt())))
    assert events[0].message.usage.input_tokens == whole.usage.input_tokens
    with client.messages.stream(**kw, extra_body=_salt()) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    _same(final, whole)
    assert text == "".join(b.text for b in whole.content if b.type == "text")


def test_thinking_and_tool_use_streamed_and_not(client, model):
    kw = dict(
        model=model,
        messages=ASK,
        tools=TOOLS,
        max_tokens=1100,
        thinking={"type": "enabled", "budget_tokens": 1024},  # Anthropic's floor
        extra_body={"seed": 1, "guided_grammar": THINK_THEN_CALL},
    )
    m = client.messages.create(**kw)
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"] and m.stop_reason == "tool_use"
    thinking, text, call = m.content
    assert thinking.thinking == "I should check the weather." and thinking.signature
    assert text.text == "Let me check. " and call.name == "get_weather" and call.id.startswith("toolu_")
    jsonschema.validate(call.input, WEATHER)
    events = _checked(list(client.messages.create(**kw, stream=True)))
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= deltas
    with client.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    _same(final, m)


def test_tool_result_round_trip(client, model):
    first = client.messages.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        max_tokens=200,
        extra_body={"seed": 1, "guided_grammar": THINK_THEN_CALL},
    )
    call = next(b for b in first.content if b.type == "tool_use")
    turns = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "Sunny, 21C"}]},
                {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    grammar = r'root ::= "It is sunny."'
    kw = dict(
        model=model, messages=turns, tools=TOOLS, max_tokens=40, extra_body={"guided_grammar": grammar, "seed": 2}
    )
    m = client.messages.create(**kw)
    assert (
        [b.type for b in m.content] == ["text"] and m.content[0].text == "It is sunny." and m.stop_reason == "end_turn"
    )
    count = client.messages.count_tokens(model=model, messages=turns, tools=TOOLS)
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == count.input_tokens > first.usage.input_tokens
    with client.messages.stream(**kw) as stream:
        _same(stream.get_final_message(), m)


def test_tool_choice_tool_and_any_without_parallel(client, model):
    m = client.messages.create(
        model=model, messages=ASK, tools=TOOLS, max_tokens=60, tool_choice={"type": "tool", "name": "get_weather"}
    )
    (call,) = m.content
    assert call.type == "tool_use" and m.stop_reason == "tool_use"
    jsonschema.validate(call.input, WEATHER)
    choice = {"type": "any", "disable_parallel_tool_use": True}
    for seed in range(3):
        m = client.messages.create(
            model=model, messages=ASK, tools=TOOLS, max_tokens=120, tool_choice=choice, extra_body={"seed": seed}
        )
        calls = [b for b in m.content if b.type == "tool_use"]
        assert len(calls) <= 1 and (m.stop_reason == "tool_use") == bool(calls)
    none = client.messages.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        max_tokens=20,
        tool_choice={"type": "none"},
        extra_body={"guided_grammar": THINK_THEN_CALL},
    )
    assert all(b.type != "tool_use" for b in none.content)


def test_thinking_disabled_drops_thinking_and_omitted_keeps_its_signature(client, model):
    grammar = r'root ::= "<think>Hidden.</think>Shown."'
    kw = dict(model=model, messages=ASK, max_tokens=40, extra_body={"guided_grammar": grammar})
    off = client.messages.create(**kw, thinking={"type": "disabled"})
    assert [(b.type, b.text) for b in off.content] == [("text", "Shown.")]
    on = client.messages.create(**{**kw, "max_tokens": 1100}, thinking={"type": "enabled", "budget_tokens": 1024})
    assert off.usage.input_tokens + off.usage.cache_read_input_tokens > (
        on.usage.input_tokens + on.usage.cache_read_input_tokens
    )  # disabled: the template closes an empty think block in the prompt
    omitted = client.messages.create(**kw, thinking={"type": "adaptive", "display": "omitted"})
    assert [b.type for b in omitted.content] == ["thinking", "text"]
    assert omitted.content[0].thinking == "" and omitted.content[0].signature


def test_stop_sequence_and_max_tokens(client, model):
    grammar = r'root ::= "Hello STOP and more words here"'
    kw = dict(model=model, messages=ASK, extra_body={"guided_grammar": grammar, "seed": 2})
    m = client.messages.create(**kw, max_tokens=40, stop_sequences=["STOP"])
    assert (m.stop_reason, m.stop_sequence, m.content[0].text) == ("stop_sequence", "STOP", "Hello ")
    with client.messages.stream(**kw, max_tokens=40, stop_sequences=["STOP"]) as stream:
        _same(stream.get_final_message(), m)
    cut = client.messages.create(**kw, max_tokens=2)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2 and cut.stop_sequence is None


def test_count_tokens_equals_usage(client, model):
    kw = dict(model=model, messages=ASK, system="You forecast.", tools=TOOLS, thinking={"type": "disabled"})
    count = client.messages.count_tokens(**kw).input_tokens
    salt = _salt()
    cold = client.messages.create(**kw, max_tokens=2, extra_body=salt)
    assert cold.usage.input_tokens == count and cold.usage.cache_read_input_tokens == 0
    warm = client.messages.create(**kw, max_tokens=2, extra_body=salt)  # the same prefix, cached now
    assert warm.usage.cache_read_input_tokens > 0
    assert warm.usage.input_tokens + warm.usage.cache_read_input_tokens == count
    events = list(client.messages.create(**kw, max_tokens=2, stream=True, extra_body=salt))
    assert events[0].message.usage.input_tokens == count  # message_start: the whole prompt, before the cache split
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.input_tokens + delta.usage.cache_read_input_tokens == count


def test_claude_code_shaped_request(server, client, model):
    """What Claude Code sends: system blocks with cache_control, beta headers and ?beta=true, fields
    this server does not use, metadata.user_id, a multi-turn tool conversation, stream: true."""
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "Check Lima.", "cache_control": {"type": "ephemeral"}}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "abc"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lima", "days": 1}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Rain", "is_error": False}],
        },
    ]
    kw = dict(
        model=model,
        max_tokens=200,
        system=[{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        messages=turns,
        tools=[{**TOOLS[0], "cache_control": {"type": "ephemeral"}}],
        metadata={"user_id": "user_abc_session_1"},
        betas=["interleaved-thinking-2025-05-14", "fine-grained-tool-streaming-2025-05-14"],
        extra_body={
            "guided_grammar": THINK_THEN_CALL,
            "seed": 3,
            "service_tier": "auto",
            "context_management": {"edits": []},
            "container": None,
        },
    )
    events = _checked(list(client.beta.messages.create(**kw, stream=True)))
    blocks = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert blocks == ["thinking", "text", "tool_use"] and events[-2].delta.stop_reason == "tool_use"
    whole = client.beta.messages.create(**kw)
    assert [b.type for b in whole.content] == blocks
    r = httpx.post(
        f"{server.url}/v1/messages?beta=true",
        json={"model": model, "max_tokens": 4, "messages": ASK},
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"},
        timeout=T,
    )
    assert r.status_code == 200 and r.json()["type"] == "message"


def _error(server, body: dict, headers: dict | None = None, path: str = "/v1/messages") -> tuple[int, dict]:
    r = httpx.post(f"{server.url}{path}", json=body, headers={"x-api-key": KEY, **(headers or {})}, timeout=T)
    return r.status_code, r.json()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"messages": ASK, "max_tokens": None}, "max_tokens"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]}, "tool_use_id"),
        ({"messages": [{"role": "user", "content": [{"type": "video", "url": "v"}]}]}, "messages.0.content.0.type"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "document blocks"),
        ({"messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 8}}, "budget_tokens"),
        ({"messages": ASK, "tool_choice": {"type": "any"}}, "tool_choice"),
        ({"messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"messages": [*ASK, {"role": "assistant", "content": "The"}]}, "prefill"),
    ],
)
def test_bad_requests_are_400_in_anthropic_shape_naming_the_field(server, model, body, named):
    body = {k: v for k, v in {"model": model, "max_tokens": 8, **body}.items() if v is not None}
    status, err = _error(server, body)
    assert status == 400 and err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert named in err["error"]["message"], err


def test_errors_are_the_sdks_exception_types(server, client, model):
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(
            model=model, messages=ASK, max_tokens=8, thinking={"type": "enabled", "budget_tokens": 8}
        )
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-sonnet-4-5", messages=ASK, max_tokens=8)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-sonnet-4-5", messages=ASK)
    wrong = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0, timeout=T)
    with pytest.raises(anthropic.AuthenticationError) as auth:
        wrong.messages.create(model=model, messages=ASK, max_tokens=8)
    assert "x-api-key" in auth.value.message
    status, err = _error(
        server, {"model": model, "messages": ASK}, path="/v1/messages/count_tokens?x=1", headers={"x-api-key": "no"}
    )
    assert status == 401 and err["error"]["type"] == "authentication_error"


def test_error_after_the_stream_began_is_an_error_event(server, client, model):
    server.faults.arm("raise")
    events = []
    with pytest.raises(anthropic.APIStatusError):  # the SDK raises the stream's `error` event
        for e in client.messages.create(model=model, messages=ASK, max_tokens=8, stream=True, extra_body=_salt()):
            events.append(e)
    assert events[0].type == "message_start"
    assert client.messages.create(model=model, messages=ASK, max_tokens=2).type == "message"  # the server lives on


def test_a_long_prefill_sends_pings(server, model):
    server.faults.arm("slow", 6)  # above serving.PING_SECONDS
    body = {"model": model, "messages": ASK, "max_tokens": 2, "stream": True, **_salt()}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=T) as r:
        names = [line.removeprefix("event: ") for line in r.iter_lines() if line.startswith("event: ")]
    assert names[0] == "message_start" and "ping" in names and names[-2:] == ["message_delta", "message_stop"]


def test_openapi_lists_the_routes(server):
    paths = httpx.get(f"{server.url}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}, timeout=T).json()[
        "paths"
    ]
    assert {"/v1/messages", "/v1/messages/count_tokens"} <= paths.keys()
