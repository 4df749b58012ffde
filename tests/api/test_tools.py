"""Tool calling with the official `openai` client: tool_choice required / named on the default
template, auto on a Hermes-style template (parsed from what the model was forced to write),
streaming equal to non-streaming, and tool messages round-tripping through the template."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from conftest import Server

pytestmark = pytest.mark.timeout(240)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["c", "f"]},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
HERMES_TEMPLATE = (
    "{%- if tools %}<|system|>Tools: <tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>"
    ' Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call></s>{%- endif %}'
    "{%- for m in messages %}"
    "{%- if m['role'] == 'assistant' and m.get('tool_calls') %}<|assistant|>{{ m['content'] or '' }}"
    "{%- for c in m['tool_calls'] %}<tool_call>{{ {'name': c['function']['name'], "
    "'arguments': c['function']['arguments']} | tojson }}</tool_call>{%- endfor %}</s>"
    "{%- elif m['role'] == 'tool' %}<|tool|><tool_response>{{ m['content'] }}</tool_response></s>"
    "{%- else %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{%- endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# What a Hermes model writes, forced on the noise model: some content, then one call.
FORCED = r"""root ::= "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": " args "}</tool_call>"
args ::= "{\"city\": \"" ("Paris" | "Lima") "\", \"days\": " [1-7] ", \"unit\": \"c\"}"
"""


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def hermes_server(tmp_path_factory):
    from helpers import make_hf_model

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    hf = make_hf_model(tmp_path_factory.mktemp("hermes-hf"), "llama", max_position_embeddings=1024)
    (hf / "chat_template.jinja").write_text(HERMES_TEMPLATE)
    engine = tmp_path_factory.mktemp("engines") / "tiny-hermes"
    build_engine(BuildConfig(model=str(hf), tokens_per_block=16), engine, quiet=True)
    s = Server(engine, "--kv-cache-memory", "32MiB", log=tmp_path_factory.mktemp("logs") / "hermes.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def hermes(hermes_server):
    return openai.OpenAI(base_url=f"{hermes_server.url}/v1", api_key="x", max_retries=0)


def _stream_calls(chunks) -> tuple[str, dict[int, dict], str | None]:
    """Content, {index: {id, name, arguments}} and finish_reason assembled from a stream."""
    content, calls, finish = "", {}, None
    for ch in chunks:
        if not ch.choices:
            continue
        c = ch.choices[0]
        content += c.delta.content or ""
        for d in c.delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            if d.id:
                assert call["id"] is None and d.function.name  # the first delta of a call names it
                call["id"], call["name"] = d.id, d.function.name
            call["arguments"] += d.function.arguments or ""
        finish = c.finish_reason or finish
    return content, calls, finish


def test_required_arguments_validate_against_the_functions_schema(client, model_name):
    """parallel_tool_calls=False: one call (a noise model rarely closes a free-length array)."""
    for seed in range(6):
        out = client.chat.completions.create(
            model=model_name,
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            seed=seed,
            max_tokens=200,
        )
        c = out.choices[0]
        assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c.message
        call = c.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_") and c.message.content is None
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_named_function_and_streaming_agree(client, model_name):
    kw = dict(
        model=model_name,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        seed=4,
        max_tokens=60,
    )
    whole = client.chat.completions.create(**kw).choices[0]
    (call,) = whole.message.tool_calls
    assert call.function.name == "get_time" and whole.finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), TIME)
    content, calls, finish = _stream_calls(client.chat.completions.create(**kw, stream=True))
    assert content == "" and finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [("get_time", call.function.arguments)]
    req = dict(
        model=model_name,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        seed=2,
        max_tokens=200,
    )
    whole = client.chat.completions.create(**req).choices[0]
    content, calls, finish = _stream_calls(client.chat.completions.create(**req, stream=True))
    got = [(c["name"], c["arguments"]) for c in calls.values()]
    assert (
        got == [(t.function.name, t.function.arguments) for t in whole.message.tool_calls]
        and finish == whole.finish_reason
    )


def test_bad_tool_requests_are_400s(server, model_name):
    def post(body):
        return httpx.post(f"{server.url}/v1/chat/completions", json={"model": model_name, "messages": MESSAGES, **body})

    r = post({"tool_choice": "required"})
    assert r.status_code == 400 and "needs tools" in r.text
    r = post({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert r.status_code == 400 and "not among the tools" in r.text
    r = post({"tools": TOOLS, "tool_choice": "required", "guided_regex": "a"})
    assert r.status_code == 400 and "constrains the output" in r.text


def test_auto_parses_the_call_a_hermes_model_wrote(hermes):
    name = hermes.models.list().data[0].id
    kw = dict(model=name, messages=MESSAGES, tools=TOOLS, max_tokens=200, seed=1, extra_body={"guided_grammar": FORCED})
    c = hermes.chat.completions.create(**kw).choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content == "Let me check. "
    (call,) = c.message.tool_calls
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER)
    content, calls, finish = _stream_calls(hermes.chat.completions.create(**kw, stream=True))
    assert (content, finish) == ("Let me check. ", "tool_calls")
    assert [(v["name"], json.loads(v["arguments"])) for v in calls.values()] == [("get_weather", args)]
    # tool_choice "none": the same text comes back as content, unparsed.
    c = hermes.chat.completions.create(**kw, tool_choice="none").choices[0]
    assert c.message.tool_calls is None and "<tool_call>" in c.message.content and c.finish_reason == "stop"


def test_tool_messages_round_trip_through_the_template(hermes, hermes_server):
    name = hermes.models.list().data[0].id
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    convo = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    ids = httpx.post(f"{hermes_server.url}/tokenize", json={"model": name, "messages": convo}).json()["tokens"]
    text = httpx.post(f"{hermes_server.url}/detokenize", json={"model": name, "tokens": ids}).json()["prompt"]
    assert '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>' in text
    assert text.endswith("<|tool|><tool_response>12:00</tool_response></s><|assistant|>")
    out = hermes.chat.completions.create(model=name, messages=convo, tools=TOOLS, max_tokens=3, seed=0)
    assert out.usage.prompt_tokens > len(ids) + 20  # the tools are rendered into the prompt too
