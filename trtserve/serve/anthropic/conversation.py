"""An Anthropic request as the chat request it means: `system` and the turns as chat messages, the
tools as functions, tool_choice and output_config as chat's, the sampling fields as they are. The
same conversation then renders to the same prompt tokens as on /v1/chat/completions."""

from __future__ import annotations

import json

from pydantic import ValidationError

from trtserve.serve.anthropic.protocol import (
    CountTokensRequest,
    ImageBlock,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from trtserve.serve.errors import APIError
from trtserve.serve.openai.content import ImageURL, ImageURLPart
from trtserve.serve.openai.protocol import ChatCompletionRequest, ChatMessage, TextPart
from trtserve.serve.openai.tools import FunctionCall, FunctionDef, NamedFunction, NamedToolChoice, Tool, ToolCall

# Fields that mean the same on both APIs (by chat's name), passed through as they are.
_SAMPLING = ("temperature", "top_p", "top_k", "seed", "min_p", "repetition_penalty", "timeout", "guided_grammar")


def as_chat(req: CountTokensRequest) -> ChatCompletionRequest:
    """The chat request `req` means (a count_tokens body: only what makes the prompt)."""
    fields = {}
    if isinstance(req, MessagesRequest):
        fields = req.model_dump(include=set(_SAMPLING), exclude_none=True)
        fields |= {"max_tokens": req.max_tokens, "stop": req.stop_sequences, "user": req.user()}
    try:
        return ChatCompletionRequest(
            model=req.model,
            messages=chat_messages(req),
            tools=[Tool(function=_function(t)) for t in req.tools] if req.tools else None,
            tool_choice=_tool_choice(req),
            parallel_tool_calls=req.parallel(),
            response_format=_response_format(req),
            **fields,
        )
    except ValidationError as err:  # the request was validated already; this names what still failed
        e = err.errors()[0]
        raise APIError(400, f"{'.'.join(map(str, e['loc']))}: {e['msg']}") from None


def chat_messages(req: CountTokensRequest) -> list[ChatMessage]:
    """A user turn's text blocks are one user message and each tool_result a `tool` message, in
    their order; an assistant turn is one message with its text, its thinking as
    `reasoning_content` and its tool_use blocks as `tool_calls`."""
    system = req.system_text()
    out = [ChatMessage(role="system", content=system)] if system is not None else []
    for m in req.messages:
        if m.role == "assistant":
            out.append(_assistant(m.blocks()))
            continue
        text: list[str | ImageURLPart] = []
        for b in m.blocks():
            if isinstance(b, ToolResultBlock):
                if text:
                    out.append(ChatMessage(role=m.role, content=_content(text)))
                    text = []
                out.append(ChatMessage(role="tool", tool_call_id=b.tool_use_id, content=b.text()))
            elif isinstance(b, TextBlock):
                text.append(b.text)
            elif isinstance(b, ImageBlock):  # chat's image_url part (docs/vision.md)
                text.append(ImageURLPart(type="image_url", image_url=ImageURL(url=b.url())))
        if text or not m.blocks():
            out.append(ChatMessage(role=m.role, content=_content(text)))
    return out


def _content(parts: list[str | ImageURLPart]) -> str | list:
    """A user message's text, or its parts where it holds an image."""
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return [TextPart(type="text", text=p) if isinstance(p, str) else p for p in parts]


def _assistant(blocks: list) -> ChatMessage:
    """redacted_thinking blocks are dropped: opaque, and this server writes none."""
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    thinking = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock)) or None
    calls = [
        ToolCall(id=b.id, function=FunctionCall(name=b.name, arguments=json.dumps(b.input, ensure_ascii=False)))
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    return ChatMessage(role="assistant", content=text, reasoning_content=thinking, tool_calls=calls or None)


def _function(t) -> FunctionDef:
    return FunctionDef(name=t.name, description=t.description, parameters=t.input_schema)


def _tool_choice(req: CountTokensRequest):
    c = req.tool_choice
    if c is None:
        return None
    if isinstance(c, ToolChoiceTool):
        return NamedToolChoice(function=NamedFunction(name=c.name))
    if isinstance(c, ToolChoiceNone):
        return "none"
    return "required" if isinstance(c, ToolChoiceAny) else "auto"


def _response_format(req: CountTokensRequest) -> dict | None:
    fmt = req.output_config.format if req.output_config else None
    if fmt is None:
        return None
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt.schema_}}
