"""Tool calls in generated text: one parser per chat-template family, fed incrementally.

A parser is fed the sequence's text as it is detokenized and returns the plain content that is
safe to show so far and the tool-call deltas completed so far; `finish()` flushes the rest. The
non-streaming result is the same parser fed the whole text at once, so a stream and a
non-streamed response always agree.

Families (what the chat template teaches the model to write):
- hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, content around them
  (Hermes 2/3, Qwen 2/2.5/3, many fine-tunes).
- llama3_json: the whole reply is `{"name": ..., "parameters": {...}}` (Llama 3.1/3.2 JSON tool
  calling), optionally after `<|python_tag|>`, several separated by `;`.
- json_array: `[{"name": ..., "arguments": {...}}, ...]`, what trtserve constrains the output to
  for tool_choice "required" (any template).
The other families' formats are in tool_formats.py, and every parser's name in tool_parsers.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass
class ToolCallDelta:
    """Part of tool call number `index` of a sequence: the first part carries the name."""

    index: int
    name: str | None  # set on the call's first delta only
    arguments: str  # a fragment of the arguments' JSON text


@dataclass
class ParsedCall:
    name: str
    arguments: str  # JSON text of an object


class ToolCallParser:
    """Base: feed text, get (content, deltas). Subclasses implement `_feed` and `_finish`."""

    id_length: int | None = None  # call ids of exactly this many letters and digits (Mistral's 9)
    special_tokens = False  # the format is written in special tokens (the text must keep them)

    def __init__(self, schemas: dict[str, dict] | None = None):
        self.calls: list[ParsedCall] = []

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        return self._feed(text)

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        return self._finish()

    def parse(self, text: str) -> tuple[str, list[ParsedCall]]:
        """The whole text at once: (content, calls)."""
        a, _ = self.feed(text)
        b, _ = self.finish()
        return a + b, list(self.calls)

    def _emit(self, name: str, arguments) -> list[ToolCallDelta]:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        self.calls.append(ParsedCall(name, args))
        i = len(self.calls) - 1
        return [ToolCallDelta(i, name, ""), ToolCallDelta(i, None, args)]  # header first, as OpenAI streams

    def _call(self, obj, args_key: str = "arguments") -> list[ToolCallDelta] | None:
        """Deltas for one decoded call object, or None if it is not one."""
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
        return self._emit(obj["name"], args if args is not None else {})

    def _finish(self) -> tuple[str, list[ToolCallDelta]]:
        raise NotImplementedError

    def _feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        raise NotImplementedError


def _held_prefix(buf: str, tag: str) -> int:
    """Length of the longest suffix of buf that could begin `tag` (held back until it is decided)."""
    for k in range(min(len(buf), len(tag) - 1), 0, -1):
        if tag.startswith(buf[-k:]):
            return k
    return 0


# The head of a Hermes call body, up to where its arguments begin: `{"name": "f", "arguments": `.
_HERMES_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


def _value_end(text: str) -> int | None:
    """End of the JSON object or array that starts `text`, or None while it is incomplete."""
    depth, in_str, esc = 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            esc, in_str = (not esc and ch == "\\"), in_str and (esc or ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0:
            return None  # not an object or array: known only at the closing tag
    return None


class HermesParser(ToolCallParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Once a call's head has been read
    its name is sent, then its arguments as the model writes them (raw text, up to the end of the
    arguments value); a body without that head is decoded whole at the closing tag."""

    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def __init__(self, schemas: dict[str, dict] | None = None):
        super().__init__(schemas)
        self._buf, self._in_call = "", False
        self._head: re.Match | None = None  # the current call's head, once read
        self._sent = 0  # characters of its arguments sent

    def _feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._buf += text
        content, deltas = "", []
        while True:
            if not self._in_call:
                at = self._buf.find(self.OPEN)
                if at < 0:
                    keep = _held_prefix(self._buf, self.OPEN)
                    content += self._buf[: len(self._buf) - keep]
                    self._buf = self._buf[len(self._buf) - keep :]
                    return content, deltas
                content += self._buf[:at]
                self._buf, self._in_call = self._buf[at + len(self.OPEN) :], True
            at = self._buf.find(self.CLOSE)
            if at < 0:
                return content, deltas + self._stream_arguments()
            body, self._buf = self._buf[:at], self._buf[at + len(self.CLOSE) :]
            call = self._end_call(body)
            if call is None:  # not a tool call after all: show it as text
                content += self.OPEN + body + self.CLOSE
            else:
                deltas += call

    def _stream_arguments(self) -> list[ToolCallDelta]:
        """The call's name once its head is complete, then whatever of its arguments is certain."""
        out = []
        if self._head is None:
            self._head = _HERMES_HEAD.match(self._buf)
            if self._head is None:
                return out
            self.calls.append(ParsedCall(json.loads(f'"{self._head[1]}"'), ""))
            out.append(ToolCallDelta(len(self.calls) - 1, self.calls[-1].name, ""))
        args = self._buf[self._head.end() :]
        end = _value_end(args)
        upto = end if end is not None else len(args) - _held_prefix(args, self.CLOSE)
        if upto > self._sent:
            out.append(ToolCallDelta(len(self.calls) - 1, None, args[self._sent : upto]))
            self.calls[-1].arguments += args[self._sent : upto]
            self._sent = upto
        return out

    def _end_call(self, body: str) -> list[ToolCallDelta] | None:
        """The rest of the call whose body is complete; None if it is no call."""
        self._buf, rest = body, self._buf
        deltas = self._stream_arguments()
        self._buf, self._in_call = rest, False
        head, self._head, self._sent = self._head, None, 0
        if head is not None:
            return deltas
        try:  # no streamable head (e.g. arguments before name): decode the body whole
            return self._call(json.loads(body))
        except ValueError:
            return None

    def _finish(self) -> tuple[str, list[ToolCallDelta]]:
        if not self._in_call:
            buf, self._buf = self._buf, ""
            return buf, []
        body, self._buf = self._buf, ""
        call = self._end_call(body)  # a model may stop (EOS) before closing the tag
        return ("", call) if call is not None else (self.OPEN + body, [])


class PrefixParser(ToolCallParser):
    """A format read as a pure function of the text so far: `_scan(text, final)` returns the content
    that is certain and the calls that are complete, each a prefix of what a longer text gives. A
    call is sent whole (its name, then its arguments) once it is complete, so a reply cut short
    never sends a call with broken JSON, and any chunking gives the same answer."""

    def __init__(self, schemas: dict[str, dict] | None = None):
        super().__init__()
        self.schemas = schemas or {}  # function name -> its parameters' JSON schema
        self._text, self._shown = "", 0

    def _feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._text += text
        return self._delta(False)

    def _finish(self) -> tuple[str, list[ToolCallDelta]]:
        return self._delta(True)

    def _delta(self, final: bool) -> tuple[str, list[ToolCallDelta]]:
        content, calls = self._scan(self._text, final)
        new, self._shown = content[self._shown :], len(content)
        deltas: list[ToolCallDelta] = []
        for name, args in calls[len(self.calls) :]:
            deltas += self._emit(name, args)
        return new, deltas

    def _scan(self, text: str, final: bool) -> tuple[str, list[tuple[str, str]]]:
        raise NotImplementedError


def as_call(obj, args_key: str = "arguments") -> tuple[str, str] | None:
    """(name, arguments JSON) of a decoded call object, or None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
    args = {} if args is None else args
    return obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def json_objects(text: str, seps: str) -> list[tuple[str, str]]:
    """The complete call objects at the start of `text`, separated by any of `seps` (and whitespace);
    reading stops at the first incomplete or foreign value (a cut, or text that is no call)."""
    calls, i = [], 0
    while True:
        while i < len(text) and (text[i].isspace() or text[i] in seps):
            i += 1
        if i >= len(text) or text[i] != "{":
            return calls
        end = _value_end(text[i:])
        if end is None:
            return calls
        try:
            call = as_call(json.loads(text[i : i + end]))
        except ValueError:
            call = None
        if call is None:
            return calls
        calls.append(call)
        i += end


class Llama3JsonParser(PrefixParser):
    """`{"name": ..., "parameters": {...}}` (after `<|python_tag|>`), several separated by `;`;
    a reply that does not open with `{` is content, and so is one of which no call decodes."""

    TAG = "<|python_tag|>"

    def _scan(self, text: str, final: bool) -> tuple[str, list[tuple[str, str]]]:
        head = text.lstrip()
        if head.startswith(self.TAG):
            head = head[len(self.TAG) :].lstrip()
        elif self.TAG.startswith(head):
            return ("", []) if not final else (text, [])  # undecided
        if not head:
            return ("", []) if not final else (text, [])
        if head[0] != "{":
            return text, []
        calls = json_objects(head, ";")
        return ("", calls) if calls or not final else (text, [])


class JsonArrayParser(PrefixParser):
    """`[{"name": ..., "arguments": {...}}, ...]`: what trtserve constrains the output to for
    tool_choice "required". Each call is sent as soon as its object closes; a call cut by
    max_tokens is dropped, the complete ones before it kept, and the array is never content."""

    def _scan(self, text: str, final: bool) -> tuple[str, list[tuple[str, str]]]:
        head = text.lstrip()
        if not head:
            return ("", []) if not final else (text, [])
        if head[0] != "[":
            return text, []
        return "", json_objects(head[1:], ",")


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on `sep` outside JSON strings and brackets."""
    parts, depth, start, in_str, esc = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            esc, in_str = (not esc and ch == "\\"), in_str and (esc or ch != '"')
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
    "json_array": JsonArrayParser,
}


def family_of_template(template: str | None) -> str:
    """The tool-call family a chat template teaches (hermes unless it is Llama 3's)."""
    if template and ("<|python_tag|>" in template or "ipython" in template):
        return "llama3_json"
    return "hermes"
