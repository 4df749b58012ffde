"""LangChain's ChatOpenAI against a live server: invoke, with_structured_output and bind_tools
with a forced tool call, as LangChain's docs show."""

from __future__ import annotations

from typing import Literal

import pytest
from client_shapes import TIMEOUT_S, Person
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

pytestmark = pytest.mark.timeout(300)


class GetWeather(BaseModel):
    """Get the weather in a city."""

    city: str = Field(max_length=8)
    unit: Literal["celsius", "fahrenheit"]


@pytest.fixture(scope="module")
def llm(server, model_name):
    return ChatOpenAI(
        base_url=f"{server.url}/v1",
        api_key="x",
        model=model_name,
        timeout=TIMEOUT_S,
        max_retries=0,
        max_tokens=120,
        temperature=1.0,
        seed=0,
    )


def test_invoke(llm):
    msg = llm.bind(max_tokens=8).invoke("Say hello.")
    assert isinstance(msg, AIMessage) and isinstance(msg.content, str) and msg.content
    assert msg.response_metadata["finish_reason"] in ("stop", "length")
    assert 0 < msg.usage_metadata["output_tokens"] <= 8


def test_with_structured_output(llm):
    person = llm.with_structured_output(Person).invoke("Describe a person.")
    assert isinstance(person, Person) and 18 <= person.age <= 99


def test_bind_tools_forced_call(llm):
    msg = llm.bind_tools([GetWeather], tool_choice="GetWeather").invoke("Weather in Paris?")
    assert len(msg.tool_calls) == 1, msg
    call = msg.tool_calls[0]
    assert call["name"] == "GetWeather" and call["id"]
    assert isinstance(GetWeather(**call["args"]), GetWeather)
