"""The Responses API (`/v1/responses`) with the official `openai` client against a live server:
greedy text equal to chat completions for the same messages, the typed stream equal to the body,
json_schema through the structured-output path, a function-call round trip, previous_response_id
conversations, GET / DELETE / cancel on the state store, receipts and Idempotency-Key, errors."""

from __future__ import annotations

import json
import signal
import time

import httpx
import jsonschema
import openai
import pytest
from conftest import Server

pytestmark = pytest.mark.timeout(300)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Forecast", "parameters": WEATHER}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "role": {"enum": ["admin", "user", "guest"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


@pytest.fixture(scope="module")
def live(tiny_llama_engine, tmp_path_factory, faults):
    """A server with a state dir, its engine step slowed on demand (the `faults` fixture)."""
    d = tmp_path_factory.mktemp("responses")
    f = faults("responses")
    s = Server(
        tiny_llama_engine, "--kv-cache-memory", "64MiB", "--state-dir", str(d / "state"), log=d / "server.log",
        launcher=f.launcher,
    )  # fmt: skip
    s.faults = f
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def _chat_text(client, model, messages, max_tokens):
    c = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0)
    return c.choices[0]


def test_greedy_text_equals_chat_completions(client, model, live):
    choice = _chat_text(
        client, model, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], 12
    )
    raw = client.responses.with_raw_response.create(
        model=model, instructions="Be brief.", input="Hi", max_output_tokens=12, temperature=0
    )
    r = raw.parse()
    assert r.object == "response" and r.id.startswith("resp_") and r.output_text == choice.message.content
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.content[0].type == "output_text"
    if choice.finish_reason == "length":
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        assert item.status == "incomplete"
    else:
        assert r.status == "completed" and r.incomplete_details is None
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_tokens=12, temperature=0,
    )  # fmt: skip
    assert r.usage.input_tokens == chat.usage.prompt_tokens and r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.model.startswith(model) and r.max_output_tokens == 12 and r.instructions == "Be brief."
    # The run's receipt id, in the header and the body alike.
    body = json.loads(raw.http_response.text)
    assert raw.headers["x-trtserve-receipt"] == body["receipt"] and body["receipt"].startswith("rcpt-")
    # The same conversation as items (system and user messages, input_text parts).
    items = [
        {"role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    ]
    again = client.responses.create(model=model, input=items, max_output_tokens=12, temperature=0)
    assert again.output_text == r.output_text and again.usage.input_tokens == r.usage.input_tokens


def test_stream_events_and_text_equal_the_body(client, model):
    kw = dict(model=model, input="Continuous batching", max_output_tokens=16, temperature=0)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(**kw, stream=True))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert types[:5] == TEXT_EVENTS[:5] and types[-4:-1] == TEXT_EVENTS[-3:]
    assert set(types[4 : len(types) - 4]) == {"response.output_text.delta"}
    assert types[-1] == ("response.completed" if whole.status == "completed" else "response.incomplete")
    assert "".join(d.delta for d in deltas) == whole.output_text
    created, done = events[0].response, events[-1].response
    assert created.status == "in_progress" and created.output == [] and created.id == done.id
    assert done.output_text == whole.output_text and done.status == whole.status
    assert done.usage.output_tokens == whole.usage.output_tokens
    item_id = events[2].item.id
    assert {e.item_id for e in deltas} == {item_id} and done.output[0].id == item_id
    assert events[-4].text == whole.output_text and events[-2].item.status == done.output[0].status
    # The streamed response was stored: GET finds it, finished.
    assert client.responses.retrieve(done.id).output_text == whole.output_text


def test_json_schema_output_parses_and_validates(client, model):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    for seed in range(3):
        r = client.responses.create(
            model=model,
            input="Describe a person.",
            text={"format": fmt},
            max_output_tokens=120,
            extra_body={"seed": seed},
        )
        assert r.status == "completed" and r.text.format.type == "json_schema"
        jsonschema.validate(json.loads(r.output_text), PERSON)


def test_function_call_round_trip(client, model):
    kw = dict(model=model, tools=TOOLS, max_output_tokens=80, temperature=0)
    first = client.responses.create(
        **kw, input="Weather in Paris?", tool_choice="required", parallel_tool_calls=False
    )  # fmt: skip
    calls = [i for i in first.output if i.type == "function_call"]
    assert len(calls) == 1 and first.status == "completed", first.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.id.startswith("fc_")
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'}
    # With previous_response_id: the stored conversation and the call come first.
    follow = client.responses.create(**kw, previous_response_id=first.id, input=[result], tool_choice="none")
    assert follow.previous_response_id == first.id and follow.output[0].type == "message"
    assert follow.usage.input_tokens > first.usage.input_tokens
    # With the whole conversation sent again (the earlier output items as input): the same prompt and text.
    full = [{"role": "user", "content": "Weather in Paris?"}, *first.output, result]
    again = client.responses.create(**kw, input=full, tool_choice="none")
    assert again.output_text == follow.output_text and again.usage.input_tokens == follow.usage.input_tokens
    # The items as plain dicts (an SDK model's model_dump(), its unset fields null) are accepted too.
    dumped = [full[0], *[i.model_dump() for i in first.output], result]
    assert client.responses.create(**kw, input=dumped, tool_choice="none").output_text == follow.output_text


def test_streamed_function_call_equals_the_body(client, model):
    kw = dict(model=model, input="Weather?", tools=TOOLS, tool_choice={"type": "function", "name": "get_weather"})
    kw |= dict(max_output_tokens=60, temperature=0)
    whole = client.responses.create(**kw)
    (call,) = whole.output
    assert call.type == "function_call" and call.name == "get_weather"
    events = list(client.responses.create(**kw, stream=True))
    types = [e.type for e in events]
    assert types[2] == "response.output_item.added" and events[2].item.type == "function_call"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args == done.arguments == call.arguments and types[-1] == "response.completed"
    assert events[-1].response.output[0].call_id == events[2].item.call_id


def test_previous_response_id_equals_the_chat_conversation(client, model):
    r1 = client.responses.create(model=model, input="Hello", max_output_tokens=8, temperature=0)
    r2 = client.responses.create(
        model=model, previous_response_id=r1.id, input="And then?", max_output_tokens=8, temperature=0
    )  # fmt: skip
    messages = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": r1.output_text},
        {"role": "user", "content": "And then?"},
    ]
    assert r2.output_text == _chat_text(client, model, messages, 8).message.content
    # What the model saw (earlier output included, instructions not), listed with ids, both ways and paged.
    listed = client.responses.input_items.list(r2.id, order="asc")
    assert [(i.type, i.role, i.content[0].text) for i in listed.data] == [
        ("message", "user", "Hello"),
        ("message", "assistant", r1.output_text),
        ("message", "user", "And then?"),
    ]
    assert listed.data[1].id == r1.output[0].id and not listed.has_more
    newest = client.responses.input_items.list(r2.id, limit=1)
    assert [i.id for i in newest.data] == [listed.data[2].id] and newest.has_more
    rest = client.responses.input_items.list(r2.id, limit=5, after=newest.data[0].id)
    assert [i.id for i in rest.data] == [listed.data[1].id, listed.data[0].id] and not rest.has_more


def test_get_delete_and_store_false(client, model):
    r = client.responses.create(model=model, input="Paged attention", max_output_tokens=6, temperature=0)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.status == r.status
    deleted = client.responses.delete(r.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(r.id)
    assert err.value.body["type"] == "not_found_error" and r.id in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=model, previous_response_id=r.id, input="x", max_output_tokens=2)
    assert err.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model=model, input="x", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_background_runs_and_cancels(client, model, live):
    kw = dict(model=model, input="A model server", max_output_tokens=24, temperature=0)
    foreground = client.responses.create(**kw)
    bg = client.responses.create(**kw, background=True)
    assert bg.status == "in_progress" and bg.background
    deadline = time.time() + 60
    while (got := client.responses.retrieve(bg.id)).status == "in_progress" and time.time() < deadline:
        time.sleep(0.05)
    assert got.status == foreground.status and got.output_text == foreground.output_text
    assert client.responses.cancel(bg.id).status == foreground.status  # finished: answered as it is
    # Cancelled while the engine is stalled in a step: the run is aborted and nothing is left running.
    live.faults.arm("slow", 3)
    slow = client.responses.create(**kw, background=True)
    cancelled = client.responses.cancel(slow.id)
    assert cancelled.status == "cancelled" and client.responses.retrieve(slow.id).status == "cancelled"
    live.wait_idle(timeout=20)
    assert client.responses.retrieve(slow.id).status == "cancelled"  # the aborted run did not overwrite it
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.cancel(foreground.id)
    assert "background" in err.value.body["message"]


def test_a_deadline_fails_the_response(client, model, live):
    """Past its deadline a streamed response ends with response.failed (stored so); a body is a 504."""
    kw = dict(model=model, input="Slow", max_output_tokens=8, extra_body={"timeout": 0.5})
    live.faults.arm("slow", 2)
    events = list(client.responses.create(**kw, stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1].response
    assert failed.status == "failed" and "deadline" in failed.error.message
    assert client.responses.retrieve(failed.id).status == "failed"
    live.wait_idle(timeout=20)
    live.faults.arm("slow", 2)
    with pytest.raises(openai.APIStatusError) as err:
        client.responses.create(**kw)
    assert err.value.status_code == 504
    live.wait_idle(timeout=20)


def test_idempotency_key_replays_the_response(live, model):
    body = {"model": model, "input": "The quick brown fox", "max_output_tokens": 6, "temperature": 0}
    h = {"Idempotency-Key": "resp-1"}
    first = httpx.post(f"{live.url}/v1/responses", json=body, headers=h, timeout=60)
    again = httpx.post(f"{live.url}/v1/responses", json=body, headers=h, timeout=60)
    assert first.status_code == again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": []}, "at least one item"),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "message, function_call, function_call_output or reasoning"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
        ({"input": "x", "tool_choice": "required"}, "needs tools"),
        ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "not among the tools"),
        ({"input": "x", "tools": TOOLS, "tool_choice": "required", "text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"input": "x", "tools": TOOLS, "tool_choice": "required", "guided_grammar": 'root ::= "a"'}, "leave out guided_grammar"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "temperature": 3}, "temperature"),
        ({"input": "x", "background": True, "stream": True}, "background"),
        ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning"),
        ({"input": "x", "max_output_tokens": 100000}, "max_seq_len"),
    ],
)  # fmt: skip
def test_bad_requests_are_400s(live, model, body, words):
    r = httpx.post(f"{live.url}/v1/responses", json={"model": model, **body}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and words in error["message"], error


def test_unknown_ids_and_models_are_404s(client, live):
    for call in (client.responses.retrieve, client.responses.delete, client.responses.cancel):
        with pytest.raises(openai.NotFoundError) as err:
            call("resp_nope")
        assert err.value.status_code == 404 and "resp_nope" in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")


def test_without_a_state_dir_store_false_works_and_store_true_is_refused(tiny_llama_engine, tmp_path):
    s = Server(tiny_llama_engine, "--kv-cache-memory", "32MiB", "--state-dir", "none", log=tmp_path / "s.log")
    try:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0, timeout=60)
        r = c.responses.create(input="Hello", max_output_tokens=4, temperature=0)
        assert r.output_text and r.to_dict()["store"] is False
        assert c.responses.create(input="Hello", max_output_tokens=4, temperature=0, store=False).output_text
        with pytest.raises(openai.BadRequestError) as err:
            c.responses.create(input="Hello", max_output_tokens=4, store=True)
        assert err.value.body["param"] == "store" and "--state-dir" in err.value.body["message"]
        with pytest.raises(openai.NotFoundError) as err:
            c.responses.retrieve(r.id)
        assert "keeps no state" in err.value.body["message"]
    finally:
        s.stop()


def test_stored_responses_survive_a_restart(tiny_llama_engine, tmp_path, faults):
    """Finished responses are read back after a restart; a background one the server was running
    when it was killed is marked failed, not left in_progress forever."""
    f = faults("restart")
    args = ("--kv-cache-memory", "32MiB", "--state-dir", str(tmp_path / "state"))
    s = Server(tiny_llama_engine, *args, log=tmp_path / "first.log", launcher=f.launcher)
    try:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0, timeout=60)
        done = c.responses.create(input="Hello", max_output_tokens=6, temperature=0)
        f.arm("slow", 30)
        running = c.responses.create(input="Hello", max_output_tokens=6, background=True)
        time.sleep(0.5)  # the engine is asleep in the step that runs it
    finally:
        s.stop(signal.SIGKILL)
    s = Server(tiny_llama_engine, *args, log=tmp_path / "second.log")
    try:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0, timeout=60)
        assert c.responses.retrieve(done.id).output_text == done.output_text
        after = c.responses.retrieve(running.id)
        assert after.status == "failed" and "stopped" in after.error.message
        follow = c.responses.create(previous_response_id=done.id, input="Again", max_output_tokens=4, temperature=0)
        assert follow.usage.input_tokens > done.usage.input_tokens
    finally:
        s.stop()
