"""instructor over the `openai` client against a live server, in the two modes its docs lead with:
JSON_SCHEMA (a response_format json_schema) and TOOLS (a forced function call). Each request is
captured to show the mode reached the server as documented; the random model's output validates
only because the guided decoder forces the schema."""

from __future__ import annotations

import json

import httpx
import instructor
import pytest
from client_shapes import TIMEOUT_S, Person
from openai import OpenAI

pytestmark = pytest.mark.timeout(300)


def _client(server, mode, bodies: list):
    def capture(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    http = httpx.Client(timeout=TIMEOUT_S, event_hooks={"request": [capture]})
    openai = OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, http_client=http)
    return instructor.from_openai(openai, mode=mode)


@pytest.mark.parametrize("mode", [instructor.Mode.JSON_SCHEMA, instructor.Mode.TOOLS])
def test_response_model_validates(server, model_name, mode):
    bodies: list[dict] = []
    client = _client(server, mode, bodies)
    for seed in range(3):
        person = client.chat.completions.create(
            model=model_name,
            response_model=Person,
            messages=[{"role": "user", "content": "Describe a person."}],
            max_retries=1,  # one attempt: a re-ask would hide an output that did not validate
            seed=seed,
            temperature=1.0,
            max_tokens=120,
        )
        assert isinstance(person, Person) and 18 <= person.age <= 99
    assert len(bodies) == 3  # no retries happened
    body = bodies[0]
    if mode == instructor.Mode.JSON_SCHEMA:
        assert body["response_format"]["type"] == "json_schema"
    else:
        assert body["tool_choice"] == {"type": "function", "function": {"name": "Person"}}
        assert body["tools"][0]["function"]["name"] == "Person"
