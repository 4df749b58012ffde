"""Reasoning and tool calls with the official `openai` client against a live server whose chat
template thinks (`<think>`, Qwen3-style, with `enable_thinking`): the tiny random model is forced
through known text by `guided_grammar` (a grammar over the whole reply, thinking included), and the
split into reasoning, content and tool calls is the same streamed and not, on chat completions and
on Responses. Also the measured bug: Responses with tool_choice "required" cut by
max_output_tokens returns the complete calls as function_call items, never the array as text."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from conftest import Server

pytestmark = pytest.mark.timeout(300)

# Qwen3's shape: earlier reasoning rendered in assistant turns, `enable_thinking: false` closes an
# empty think block in the prompt, and (a test variable) `open_think` opens one as DeepSeek-R1's does.
THINK_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{%- if m.get('reasoning_content') %}<think>\n{{ m['reasoning_content'] }}\n</think>\n\n{% endif %}"
    "{{ m['content'] or '' }}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{%- if open_think is defined and open_think %}<think>\n{% endif %}{% endif %}"
)
WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Lima"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
RESPONSE_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
THINK_THEN_CALL = (
    r'root ::= "<think>\nI should check the weather.\n</think>\n\nLet me check. <tool_call>{\"name\": '
    r'\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": " [1-7] "}}</tool_call>"'
)
CALL_INSIDE_THINKING = (
    r'root ::= "<think>Maybe <tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call></think>Sunny."'
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from helpers import make_hf_model

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    hf = make_hf_model(tmp_path_factory.mktemp("think-hf"), "llama", max_position_embeddings=1024)
    (hf / "chat_template.jinja").write_text(THINK_TEMPLATE)
    engine = tmp_path_factory.mktemp("engines") / "tiny-think"
    build_engine(BuildConfig(model=str(hf), tokens_per_block=16), engine, quiet=True)
    d = tmp_path_factory.mktemp("think")
    s = Server(engine, "--kv-cache-memory", "32MiB", "--state-dir", str(d / "state"), log=d / "server.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def _streamed(chunks) -> dict:
    """Reasoning, content, calls and finish_reason as a client assembles them from chat chunks."""
    out = {"reasoning": "", "content": "", "calls": {}, "finish": None}
    for ch in chunks:
        if not ch.choices:
            continue
        c = ch.choices[0]
        extra = c.delta.model_extra or {}
        assert extra.get("reasoning") == extra.get("reasoning_content")  # both names, the same text
        out["reasoning"] += extra.get("reasoning_content") or ""
        out["content"] += c.delta.content or ""
        for d in c.delta.tool_calls or []:
            call = out["calls"].setdefault(d.index, {"name": None, "arguments": ""})
            call["name"] = call["name"] or d.function.name
            call["arguments"] += d.function.arguments or ""
        out["finish"] = c.finish_reason or out["finish"]
    return out


def test_reasoning_content_and_calls_split_the_same_streamed_and_not(client, model):
    kw = dict(
        model=model,
        messages=MESSAGES,
        tools=CHAT_TOOLS,
        max_tokens=200,
        seed=1,
        extra_body={"guided_grammar": THINK_THEN_CALL},
    )
    c = client.chat.completions.create(**kw).choices[0]
    extra = c.message.model_extra
    assert extra["reasoning_content"] == extra["reasoning"] == "I should check the weather."
    assert c.message.content == "Let me check. " and c.finish_reason == "tool_calls"
    (call,) = c.message.tool_calls
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER)
    s = _streamed(client.chat.completions.create(**kw, stream=True))
    assert (s["reasoning"], s["content"], s["finish"]) == (
        "I should check the weather.",
        "Let me check. ",
        "tool_calls",
    )
    assert [(v["name"], json.loads(v["arguments"])) for v in s["calls"].values()] == [("get_weather", args)]


def test_a_call_written_inside_the_thinking_is_not_a_call(client, model):
    kw = dict(
        model=model,
        messages=MESSAGES,
        tools=CHAT_TOOLS,
        max_tokens=200,
        seed=1,
        extra_body={"guided_grammar": CALL_INSIDE_THINKING},
    )
    c = client.chat.completions.create(**kw).choices[0]
    assert c.message.tool_calls is None and c.message.content == "Sunny." and c.finish_reason == "stop"
    assert c.message.model_extra["reasoning_content"].startswith("Maybe <tool_call>")
    s = _streamed(client.chat.completions.create(**kw, stream=True))
    assert (s["reasoning"], s["content"], s["calls"]) == (c.message.model_extra["reasoning_content"], "Sunny.", {})


def test_a_prompt_that_opens_think_starts_the_reply_inside_it(client, model):
    grammar = r'root ::= "I thought.\n</think>\n\nThe answer."'
    body = {"guided_grammar": grammar, "chat_template_kwargs": {"open_think": True}}
    kw = dict(model=model, messages=MESSAGES, max_tokens=60, extra_body=body)
    c = client.chat.completions.create(**kw).choices[0]
    assert (c.message.model_extra["reasoning_content"], c.message.content) == ("I thought.", "The answer.")
    s = _streamed(client.chat.completions.create(**kw, stream=True))
    assert (s["reasoning"], s["content"]) == ("I thought.", "The answer.")


def test_enable_thinking_false_renders_an_empty_think_and_the_answer_is_content(client, model):
    grammar = r'root ::= "Plain answer."'
    on = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=20, extra_body={"guided_grammar": grammar}
    )
    off = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=20,
        extra_body={"guided_grammar": grammar, "chat_template_kwargs": {"enable_thinking": False}},
    )  # fmt: skip
    assert off.usage.prompt_tokens > on.usage.prompt_tokens  # the empty <think></think> block
    for out in (on, off):
        assert out.choices[0].message.content == "Plain answer."
        assert out.choices[0].message.model_extra["reasoning_content"] is None


def test_reasoning_history_goes_into_the_template(server, model):
    convo = [
        *MESSAGES,
        {"role": "assistant", "content": "Sunny.", "reasoning": "Checked."},
        {"role": "user", "content": "And Lima?"},
    ]
    ids = httpx.post(f"{server.url}/tokenize", json={"model": model, "messages": convo}, timeout=30).json()["tokens"]
    text = httpx.post(f"{server.url}/detokenize", json={"model": model, "tokens": ids}, timeout=30).json()["prompt"]
    assert "<think>\nChecked.\n</think>\n\nSunny." in text


def test_bad_template_kwargs_and_parser_names_are_refused(server, model):
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": model, "messages": MESSAGES, "chat_template_kwargs": {"messages": []}},
        timeout=30,
    )
    assert r.status_code == 400 and "chat_template_kwargs may not set messages" in r.text


def test_responses_return_reasoning_items_streamed_and_not(client, model):
    kw = dict(model=model, input="Weather in Paris?", tools=RESPONSE_TOOLS, max_output_tokens=200,
              extra_body={"seed": 1, "guided_grammar": THINK_THEN_CALL})  # fmt: skip
    r = client.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning", "message", "function_call"] and r.status == "completed"
    assert r.output[0].content[0].text == "I should check the weather."
    assert r.output[1].content[0].text == "Let me check. "
    jsonschema.validate(json.loads(r.output[2].arguments), WEATHER)
    events = list(client.responses.create(**kw, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == "I should check the weather."
    done = events[-1].response
    assert [(o.type, o.model_dump(exclude={"id", "call_id"})) for o in done.output] == [
        (o.type, o.model_dump(exclude={"id", "call_id"})) for o in r.output
    ]
    # the next turn takes the reasoning back (previous_response_id replays the stored items)
    nxt = client.responses.create(model=model, previous_response_id=r.id, input="Thanks", max_output_tokens=4)
    assert nxt.usage.input_tokens > r.usage.input_tokens


def test_responses_required_cut_short_keeps_the_complete_calls(client, model):
    """The measured bug: the array of calls cut by max_output_tokens came back as one message's text."""
    seen_cut = False
    for seed in range(8):
        r = client.responses.create(
            model=model,
            input="Book it.",
            tools=RESPONSE_TOOLS,
            tool_choice="required",
            max_output_tokens=96,
            extra_body={"seed": seed},
        )
        assert all(o.type == "function_call" or not o.content[0].text for o in r.output), r.output
        calls = [o for o in r.output if o.type == "function_call"]
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), WEATHER)
            assert call.status == "completed"
        if r.status == "incomplete" and calls:
            seen_cut = True
    assert seen_cut, "no seed wrote a complete call before the cut"


def test_chat_required_cut_short_is_length_with_whole_calls_streamed_and_not(client, model):
    for seed in range(4):
        kw = dict(model=model, messages=MESSAGES, tools=CHAT_TOOLS, tool_choice="required", max_tokens=96, seed=seed)
        c = client.chat.completions.create(**kw).choices[0]
        calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        for _, args in calls:
            jsonschema.validate(json.loads(args), WEATHER)
        assert c.finish_reason in ("length", "tool_calls") and (c.finish_reason == "tool_calls") == (
            c.finish_reason != "length"
        )
        s = _streamed(client.chat.completions.create(**kw, stream=True))
        assert [(v["name"], v["arguments"]) for v in s["calls"].values()] == calls and s["finish"] == c.finish_reason
        assert s["content"] == (c.message.content or "")
