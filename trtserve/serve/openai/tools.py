"""Tool calling on /v1/chat/completions: `tools`, `tool_choice`, and the messages that carry calls.

- The tools and the conversation (assistant `tool_calls`, `role: "tool"` results) are rendered by
  the model's own chat template (transformers' `apply_chat_template(..., tools=...)`).
- tool_choice "none": the tools are rendered, nothing is parsed. "auto": the reply is parsed by the
  template family's parser (text/tool_parsers.py; `--tool-call-parser` overrides it). "required": the output is constrained to a JSON
  array of calls `[{"name": ..., "arguments": {...}}]` whose arguments follow each function's
  schema. A named function: the output is constrained to that function's arguments schema.
- A reply with calls ends with finish_reason "tool_calls". A call is sent once its arguments are a
  whole JSON object; one cut by max_tokens is dropped (finish_reason "length"), the whole calls
  before it kept, streamed or not.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import ConfigDict, Field

from trtserve.engine.sampling import GuidedDecoding
from trtserve.serve.json_body import JsonBody
from trtserve.serve.openai.content import template_content
from trtserve.text.tool_calls import ParsedCall, ToolCallDelta, ToolCallParser
from trtserve.text.tool_parsers import TOOL_PARSERS, CompleteCalls, new_tool_parser, tool_parser_of_template


class FunctionDef(JsonBody):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class Tool(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(JsonBody):
    model_config = ConfigDict(extra="forbid")
    name: str


class NamedToolChoice(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class FunctionCall(JsonBody):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(JsonBody):
    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


def template_message(m) -> dict:
    """One ChatMessage as chat templates expect it: tool call arguments as objects (HF's convention)."""
    role = "system" if m.role == "developer" else m.role
    msg: dict[str, Any] = {"role": role, "content": template_content(m)}  # parts where it holds images
    if m.tool_calls:
        msg["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": _loads(c.function.arguments)},
            }
            for c in m.tool_calls
        ]
    if m.role == "assistant" and (m.reasoning_content or m.reasoning):
        msg["reasoning_content"] = m.reasoning_content or m.reasoning  # the template decides where it goes
    if m.role == "tool":
        msg["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        msg["name"] = m.name
    return msg


def _loads(arguments: str):
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments  # not JSON: the template shows the text as sent


class ToolPlan:
    """How one chat request uses its tools: what constrains the output and what parses it."""

    def __init__(
        self,
        tools: list[Tool] | None,
        choice: ToolChoice | None,
        template: str | None,
        parallel: bool = True,
        parser: str | None = None,
    ):
        """parser: the tool-call parser the server was told to use (`--tool-call-parser`); None: the template's."""
        self.tools = tools or []
        choice = choice if choice is not None else ("auto" if self.tools else "none")
        self.mode = "named" if isinstance(choice, NamedToolChoice) else choice
        self.parallel = parallel
        if self.mode != "none" and not self.tools:
            raise ValueError(f"tool_choice {self.mode!r} needs tools")
        self.named: FunctionDef | None = None
        if isinstance(choice, NamedToolChoice):
            found = [t.function for t in self.tools if t.function.name == choice.function.name]
            if not found:
                raise ValueError(f"tool_choice names {choice.function.name!r}, which is not among the tools")
            self.named = found[0]
        self.family = "json_array" if self.mode == "required" else (parser or tool_parser_of_template(template))
        self.schemas = {t.function.name: t.function.parameters for t in self.tools}

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def template_tools(self) -> list[dict] | None:
        return [t.model_dump(exclude_none=True) for t in self.tools] or None

    def guided(self) -> GuidedDecoding | None:
        """The grammar `required` and a named function impose (None for none/auto)."""
        if self.named is not None:
            return GuidedDecoding(kind="json_schema", spec=json.dumps(self.named.parameters))
        if self.mode != "required":
            return None
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": t.function.name}, "arguments": t.function.parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in self.tools
        ]
        array: dict[str, Any] = {"type": "array", "items": {"anyOf": calls}, "minItems": 1}
        if not self.parallel:
            array["maxItems"] = 1
        return GuidedDecoding(kind="json_schema", spec=json.dumps(array))

    @property
    def special_tokens(self) -> bool:
        """The reply's format is written in special tokens, which detokenizing must keep."""
        return self.active and not self.named and TOOL_PARSERS[self.family].special_tokens

    def parser(self) -> ToolCallStream:
        return ToolCallStream(self)


class NamedParser(ToolCallParser):
    """A named function's reply: its arguments, constrained to the function's schema."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def _feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        head = [] if self.calls else self._emit(self.name, "")[:1]
        self.calls[0].arguments += text
        return "", head + [ToolCallDelta(0, None, text)]

    def _finish(self) -> tuple[str, list[ToolCallDelta]]:
        return "", []


class ToolCallStream:
    """One sequence's reply, fed as text: content to show and `delta.tool_calls` to send."""

    def __init__(self, plan: ToolPlan):
        self.plan = plan
        named = plan.named is not None
        self._parser = (
            CompleteCalls(NamedParser(plan.named.name)) if named else new_tool_parser(plan.family, plan.schemas)
        )
        self._ids: dict[int, str] = {}

    def feed(self, text: str, final: bool) -> tuple[str, list[dict]]:
        """(content, OpenAI tool_call delta dicts) for this piece of the reply."""
        content, deltas = self._parser.feed(text) if text else ("", [])
        if final:
            more, later = self._parser.finish()
            content, deltas = content + more, deltas + later
        return content, [self._openai(d) for d in deltas]

    @property
    def calls(self) -> list[ParsedCall]:
        return self._parser.calls

    def _openai(self, d: ToolCallDelta) -> dict:
        if d.name is not None:
            self._ids[d.index] = _call_id(self._parser.parser.id_length)
            return {
                "index": d.index,
                "id": self._ids[d.index],
                "type": "function",
                "function": {"name": d.name, "arguments": ""},
            }
        return {"index": d.index, "function": {"arguments": d.arguments}}

    def tool_calls(self) -> list[dict]:
        """The calls sent, as an assistant message's `tool_calls`."""
        return [
            ToolCall(id=self._ids[i], function=FunctionCall(name=c.name, arguments=c.arguments)).model_dump()
            for i, c in enumerate(self.calls)
        ]


def _call_id(length: int | None) -> str:
    """OpenAI's `call_...`, or exactly `length` letters and digits (Mistral's templates check them)."""
    return f"call_{uuid.uuid4().hex[:24]}" if length is None else uuid.uuid4().hex[:length]


def finish_reason(reason: str | None, has_calls: bool) -> str | None:
    """OpenAI's: a reply that ended by itself with calls ends with "tool_calls"."""
    return "tool_calls" if has_calls and reason == "stop" else reason
