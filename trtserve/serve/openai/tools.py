"""Tool calling on /v1/chat/completions: `tools`, `tool_choice`, and the messages that carry calls.

- The tools and the conversation (assistant `tool_calls`, `role: "tool"` results) are rendered by
  the model's own chat template (transformers' `apply_chat_template(..., tools=...)`).
- tool_choice "none": the tools are rendered, nothing is parsed. "auto": the reply is parsed by the
  template family's parser (text/tool_calls.py). "required": the output is constrained to a JSON
  array of calls `[{"name": ..., "arguments": {...}}]` whose arguments follow each function's
  schema. A named function: the output is constrained to that function's arguments schema.
- A reply with calls ends with finish_reason "tool_calls".
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import ConfigDict, Field

from trtserve.engine.sampling import GuidedDecoding
from trtserve.serve.json_body import JsonBody
from trtserve.text.tool_calls import PARSERS, ParsedCall, ToolCallDelta, ToolCallParser, family_of_template


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
    msg: dict[str, Any] = {"role": role, "content": m.text()}
    if m.tool_calls:
        msg["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": _loads(c.function.arguments)},
            }
            for c in m.tool_calls
        ]
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
        self, tools: list[Tool] | None, choice: ToolChoice | None, template: str | None, parallel: bool = True
    ):
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
        self.family = "json_array" if self.mode == "required" else family_of_template(template)

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

    def parser(self) -> ToolCallStream:
        return ToolCallStream(self)


class ToolCallStream:
    """One sequence's reply, fed as text: content to show and `delta.tool_calls` to send."""

    def __init__(self, plan: ToolPlan):
        self.plan = plan
        self.named_text = ""  # a named function's reply is its arguments
        self._parser: ToolCallParser | None = None if plan.named else PARSERS[plan.family]()
        self._ids: dict[int, str] = {}

    def feed(self, text: str, final: bool) -> tuple[str, list[dict]]:
        """(content, OpenAI tool_call delta dicts) for this piece of the reply."""
        if self._parser is None:
            return self._feed_named(text, final)
        content, deltas = self._parser.feed(text) if text else ("", [])
        if final:
            more, later = self._parser.finish()
            content, deltas = content + more, deltas + later
        return content, [self._openai(d) for d in deltas]

    def _feed_named(self, text: str, final: bool) -> tuple[str, list[dict]]:
        out = []
        if not self._ids:
            out.append(self._openai(ToolCallDelta(0, self.plan.named.name, "")))
        self.named_text += text
        if text:
            out.append(self._openai(ToolCallDelta(0, None, text)))
        return "", out

    @property
    def calls(self) -> list[ParsedCall]:
        if self._parser is None:
            return [ParsedCall(self.plan.named.name, self.named_text)]
        return self._parser.calls

    def _openai(self, d: ToolCallDelta) -> dict:
        if d.name is not None:
            self._ids[d.index] = f"call_{uuid.uuid4().hex[:24]}"
            return {
                "index": d.index,
                "id": self._ids[d.index],
                "type": "function",
                "function": {"name": d.name, "arguments": ""},
            }
        return {"index": d.index, "function": {"arguments": d.arguments}}

    def message(self, text: str) -> tuple[dict, bool]:
        """The whole reply as an assistant message, and whether it holds tool calls."""
        content, _ = self.feed(text, final=True)
        calls = [
            ToolCall(
                id=self._ids.get(i) or f"call_{uuid.uuid4().hex[:24]}",
                function=FunctionCall(name=c.name, arguments=c.arguments),
            ).model_dump()
            for i, c in enumerate(self.calls)
        ]
        msg = {"role": "assistant", "content": content or None if calls else content}
        if calls:
            msg["tool_calls"] = calls
        return msg, bool(calls)


def finish_reason(reason: str | None, has_calls: bool) -> str | None:
    """OpenAI's: a reply that ended by itself with calls ends with "tool_calls"."""
    return "tool_calls" if has_calls and reason == "stop" else reason
