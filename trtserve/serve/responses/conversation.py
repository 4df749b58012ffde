"""Responses input items as the chat messages the model's template renders: the same path (and so the
same prompt tokens) as /v1/chat/completions for the same conversation."""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from trtserve.serve.errors import APIError
from trtserve.serve.openai.protocol import ChatMessage
from trtserve.serve.openai.tools import FunctionCall, ToolCall
from trtserve.serve.responses.output import new_id
from trtserve.serve.responses.protocol import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    MessageItem,
    ReasoningItem,
)

_ITEMS = TypeAdapter(list[InputItem])


def parse_items(items: list[dict]) -> list:
    """Stored items (an earlier turn's input and output) back as item models."""
    try:
        return _ITEMS.validate_python(items)
    except ValidationError as err:  # written by this server: a bug, or a row from another version
        raise APIError(500, f"a stored conversation item is not valid ({err.errors()[0]['msg']})") from None


_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def dump_items(items: list) -> list[dict]:
    """Items as stored, each with an id (GET .../input_items lists them by it) and a message's text
    as a content part (OpenAI lists input messages that way)."""
    out = []
    for item in items:
        d = item.model_dump(exclude_none=True, by_alias=True)
        if d["type"] == "message" and isinstance(d["content"], str):
            part = {"type": "input_text", "text": d["content"]}
            if d["role"] == "assistant":
                part = {"type": "output_text", "text": d["content"], "annotations": []}
            d["content"] = [part]
        out.append({"id": new_id(_PREFIX[d["type"]]), **d} if "id" not in d else d)
    return out


def chat_messages(instructions: str | None, items: list) -> list[ChatMessage]:
    """instructions: a system message first. An assistant's function_call items join its message
    (or start one), as chat's `tool_calls`; a function_call_output is a `tool` message; a reasoning
    item is the `reasoning_content` of the assistant turn it precedes."""
    messages = [ChatMessage(role="system", content=instructions)] if instructions is not None else []
    thought: str | None = None  # a reasoning item waiting for its assistant turn
    for item in items:
        if isinstance(item, ReasoningItem):
            thought = (thought or "") + item.text()
        elif isinstance(item, MessageItem):
            reasoning = thought if item.role == "assistant" else None
            thought = None if item.role == "assistant" else thought
            messages.append(ChatMessage(role=item.role, content=item.chat_content(), reasoning_content=reasoning))
        elif isinstance(item, FunctionCallItem):
            call = ToolCall(id=item.call_id, function=FunctionCall(name=item.name, arguments=item.arguments))
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and thought is None:
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(
                    ChatMessage(role="assistant", content=None, tool_calls=[call], reasoning_content=thought)
                )
                thought = None
        elif isinstance(item, FunctionCallOutputItem):
            messages.append(ChatMessage(role="tool", tool_call_id=item.call_id, content=item.text()))
    return messages
