"""Every tool-call parser by name (vLLM's `--tool-call-parser` names), and the one a chat template implies."""

from __future__ import annotations

import json

from trtserve.text.tool_calls import (
    HermesParser,
    JsonArrayParser,
    Llama3JsonParser,
    ParsedCall,
    ToolCallDelta,
    ToolCallParser,
)
from trtserve.text.tool_formats import (
    DeepSeekV3Parser,
    HarmonyToolParser,
    MistralParser,
    PythonicParser,
    Qwen3CoderParser,
)

TOOL_PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser,
    "qwen3_coder": Qwen3CoderParser,
    "llama3_json": Llama3JsonParser,
    "pythonic": PythonicParser,
    "mistral": MistralParser,
    "harmony": HarmonyToolParser,
    "openai": HarmonyToolParser,  # vLLM's name for gpt-oss's
    "deepseek_v3": DeepSeekV3Parser,
    "json_array": JsonArrayParser,
}

# What a template's text teaches the model to write, tried in this order (hermes when none matches).
_MARKERS = (
    ("<|channel|>", "harmony"),
    ("<function=", "qwen3_coder"),
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("tool▁calls▁begin", "deepseek_v3"),
    ("<|python_tag|>", "llama3_json"),
    ("ipython", "llama3_json"),
    ("[func_name1(", "pythonic"),
    ("<|python_start|>", "pythonic"),
)


def tool_parser_of_template(template: str | None) -> str:
    """The tool-call format a chat template teaches (hermes, the most common, when it names none)."""
    for marker, name in _MARKERS:
        if template and marker in template:
            return name
    return "hermes"


class CompleteCalls:
    """A parser whose calls are sent only once their arguments are a whole JSON object: a parser that
    streams arguments as written (hermes) is held back per call, and at the end a call still
    incomplete (cut by max_tokens) is dropped, so a stream and the whole reply agree on the calls,
    and later calls are numbered from 0 without gaps."""

    def __init__(self, parser: ToolCallParser):
        self.parser = parser
        self.calls: list[ParsedCall] = []  # the calls sent, in order
        self._held: dict[int, ParsedCall] = {}  # parser index -> a call not yet whole
        self._index: dict[int, int] = {}  # parser index -> the index it was sent under

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        content, deltas = self.parser.feed(text)
        return content, self._gate(deltas)

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        content, deltas = self.parser.finish()
        out = self._gate(deltas)
        self._held.clear()  # never whole: dropped
        return content, out

    def parse(self, text: str) -> tuple[str, list[ParsedCall]]:
        a, _ = self.feed(text)
        b, _ = self.finish()
        return a + b, list(self.calls)

    def _gate(self, deltas: list[ToolCallDelta]) -> list[ToolCallDelta]:
        out: list[ToolCallDelta] = []
        for d in deltas:
            if d.index in self._index:  # sent already: the rest passes through
                i = self._index[d.index]
                self.calls[i].arguments += d.arguments
                out.append(ToolCallDelta(i, None, d.arguments))
                continue
            call = self._held.setdefault(d.index, ParsedCall(d.name or "", ""))
            call.arguments += d.arguments
            if _whole(call.arguments):
                del self._held[d.index]
                self._index[d.index] = len(self.calls)
                self.calls.append(call)
                out += [
                    ToolCallDelta(len(self.calls) - 1, call.name, ""),
                    ToolCallDelta(len(self.calls) - 1, None, call.arguments),
                ]
        return out


def _whole(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


def new_tool_parser(name: str, schemas: dict[str, dict] | None = None) -> CompleteCalls:
    """Parser `name` (one of TOOL_PARSERS) for functions with these parameter schemas."""
    return CompleteCalls(TOOL_PARSERS[name](schemas))
