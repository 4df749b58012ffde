"""The official `openai` client's typed helpers against a live server: `chat.completions.parse`
with a pydantic response_format, and the Responses API (`responses.create` / `responses.parse`).

The tiny model is random: the guided decoder is the only reason its output validates.
"""

from __future__ import annotations

import openai
import pytest
from client_shapes import TIMEOUT_S, Person

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=TIMEOUT_S)


def test_chat_completions_parse(client, model_name):
    for seed in range(3):
        out = client.chat.completions.parse(
            model=model_name,
            messages=[{"role": "user", "content": "Describe a person."}],
            response_format=Person,
            seed=seed,
            temperature=1.0,
            max_tokens=120,
        )
        choice = out.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        assert isinstance(choice.message.parsed, Person), choice.message.content
        assert 18 <= choice.message.parsed.age <= 99


def test_responses_create(client, model_name):
    resp = client.responses.create(model=model_name, input="Say hello.", max_output_tokens=8, temperature=0.0)
    assert resp.object == "response" and resp.status in ("completed", "incomplete"), resp
    chat = client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "x"}], max_tokens=1)
    assert resp.model == chat.model  # the same model label as chat completions
    assert isinstance(resp.output_text, str) and resp.output_text
    assert 0 < resp.usage.output_tokens <= 8
    again = client.responses.create(model=model_name, input="Say hello.", max_output_tokens=8, temperature=0.0)
    assert again.output_text == resp.output_text  # greedy: the same text twice


def test_responses_parse(client, model_name):
    resp = client.responses.parse(
        model=model_name, input="Describe a person.", text_format=Person, max_output_tokens=120, temperature=1.0
    )
    assert resp.status == "completed", resp.output_text
    assert isinstance(resp.output_parsed, Person), resp.output_text


def test_responses_stream_helper(client, model_name):
    """The SDK's stream helper returns a final response only after `response.completed`, so the
    request must end by itself: the schema closes the output before max_output_tokens."""
    deltas, kinds = [], []
    kw = dict(model=model_name, input="Describe a person.", text_format=Person, max_output_tokens=120, temperature=0.0)
    with client.responses.stream(**kw) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert deltas and "".join(deltas) == final.output_text
    assert isinstance(final.output_parsed, Person)
    plain = client.responses.parse(**kw)
    assert plain.output_text == final.output_text  # greedy: stream equals non-stream
