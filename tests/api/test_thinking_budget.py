"""The thinking budget and constraints after thinking against a live server whose chat template opens
`<think>` in the prompt (DeepSeek-R1's shape), with the official `openai` and `anthropic` clients: the
tiny random model thinks until the budget, the engine closes the block and the answer follows, the
same streamed and not; usage counts the reasoning tokens exactly; a json_schema response_format
shapes only the answer; `/metrics` labels requests by front end."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import openai
import pytest
from conftest import Server

pytestmark = pytest.mark.timeout(300)

OPEN_THINK_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
ASK = [{"role": "user", "content": "Weather in Paris?"}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Lima"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from helpers import make_hf_model

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    hf = make_hf_model(tmp_path_factory.mktemp("budget-hf"), "llama", max_position_embeddings=2048)
    (hf / "chat_template.jinja").write_text(OPEN_THINK_TEMPLATE)
    engine = tmp_path_factory.mktemp("engines") / "tiny-open-think"
    build_engine(BuildConfig(model=str(hf), tokens_per_block=16), engine, quiet=True)
    d = tmp_path_factory.mktemp("budget")
    s = Server(engine, "--kv-cache-memory", "32MiB", log=d / "server.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def _chat(client, model, **kw):
    extra = kw.pop("extra_body", {})
    return client.chat.completions.create(
        model=model, messages=ASK, temperature=0.0, extra_body={"ignore_eos": True, **extra}, **kw
    )


def _streamed(chunks) -> tuple[str, str, dict | None]:
    reasoning, content, usage = "", "", None
    for ch in chunks:
        usage = ch.usage or usage
        if ch.choices:
            reasoning += (ch.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
            content += ch.choices[0].delta.content or ""
    return reasoning, content, usage


@pytest.mark.parametrize("budget", [0, 1, 7, 20])
def test_the_budget_closes_the_thinking_and_usage_counts_it(client, model, budget):
    free = _chat(client, model, max_tokens=budget or 1).choices[0].message.model_extra["reasoning_content"]
    r = _chat(client, model, max_tokens=40, extra_body={"thinking_token_budget": budget})
    msg = r.choices[0].message
    assert r.usage.completion_tokens == 40 and r.usage.completion_tokens_details.reasoning_tokens == budget
    assert (msg.model_extra["reasoning_content"] or "") == (free if budget else "")  # free tokens, then closed
    assert msg.content  # the answer follows
    chunks = _chat(
        client,
        model,
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"thinking_token_budget": budget},
    )
    reasoning, content, usage = _streamed(chunks)
    assert (reasoning, content) == (msg.model_extra["reasoning_content"] or "", msg.content)
    assert usage.completion_tokens_details.reasoning_tokens == budget


def test_without_a_budget_a_reply_never_closed_is_all_reasoning(client, model):
    r = _chat(client, model, max_tokens=12)
    assert r.usage.completion_tokens_details.reasoning_tokens == 12 and r.choices[0].message.content == ""


def test_a_json_schema_shapes_only_the_answer_after_the_thinking(client, model):
    free = _chat(client, model, max_tokens=9).choices[0].message.model_extra["reasoning_content"]
    kw = dict(max_tokens=80, response_format=FORMAT, extra_body={"thinking_token_budget": 9, "ignore_eos": False})
    r = _chat(client, model, **kw)
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == free  # thinking was not constrained
    jsonschema.validate(json.loads(msg.content), SCHEMA)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens_details.reasoning_tokens == 9
    reasoning, content, _ = _streamed(_chat(client, model, stream=True, **kw))
    assert (reasoning, content) == (free, msg.content)


def test_responses_count_reasoning_tokens(client, model):
    r = client.responses.create(
        model=model, input="Weather in Paris?", max_output_tokens=30, extra_body={"thinking_token_budget": 6}
    )
    assert r.usage.output_tokens_details.reasoning_tokens == 6
    assert [item.type for item in r.output][:1] == ["reasoning"]


def test_anthropic_budget_tokens_is_the_engines_budget(server, client, model):
    ant = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    m = ant.messages.create(
        model=model,
        messages=ASK,
        max_tokens=1040,
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_body={"temperature": 0.0},  # today's SDK has no argument for it
    )
    long = client.with_options(timeout=300)
    chat = _chat(long, model, max_tokens=1040, extra_body={"thinking_token_budget": 1024, "ignore_eos": False})
    assert chat.usage.completion_tokens_details.reasoning_tokens <= 1024  # 1024 unless the model ended first
    assert [b.type for b in m.content][0] == "thinking"
    assert m.content[0].thinking == chat.choices[0].message.model_extra["reasoning_content"]
    with pytest.raises(anthropic.BadRequestError, match="at least 1024"):
        ant.messages.create(model=model, messages=ASK, max_tokens=64, thinking={"type": "enabled", "budget_tokens": 8})


def test_metrics_label_requests_by_front_end(server, client, model):
    _chat(client, model, max_tokens=2)
    client.responses.create(model=model, input="Hi", max_output_tokens=2)
    ant = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=60)
    ant.messages.create(model=model, messages=ASK, max_tokens=2)
    httpx.post(f"{server.url}/v2/models/{model}/generate", json={"text_input": "Hi", "max_tokens": 2}, timeout=60)
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    done = [ln for ln in text.splitlines() if ln.startswith("trtserve_request_success_total{")]
    for frontend in ("openai", "responses", "anthropic", "kserve"):
        assert any(f'frontend="{frontend}"' in ln for ln in done), (frontend, done)
