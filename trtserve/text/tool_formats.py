"""The tool-call formats of the other families, each a `PrefixParser` (a pure function of the text so
far, so any chunking gives the same calls and content, and a call is sent only once complete):

- qwen3_coder: `<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>`
  (Qwen3-Coder); a value is typed by the function's schema (a string stays text), else read as JSON.
- pythonic: `[f(a=1, b="x"), g()]`, Python call syntax with literal arguments (Llama 3.2 / 4's
  pythonic templates, optionally inside `<|python_start|>...<|python_end|>`).
- mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]` (v3) or `[TOOL_CALLS]NAME[ARGS]{...}`
  repeated (v11+), with Mistral's 9-character call ids.
- harmony: gpt-oss's messages to `functions.NAME` (the commentary channel), text/harmony.py.
- deepseek_v3: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` then the arguments
  in a ```json fence (V3), or `NAME<｜tool▁sep｜>{...}` (V3.1), each ended by `<｜tool▁call▁end｜>`.
"""

from __future__ import annotations

import ast
import json
import re

from trtserve.text import harmony
from trtserve.text.tool_calls import PrefixParser, _held_prefix, _value_end, as_call, json_objects

Calls = list[tuple[str, str]]


def _content_around(text: str, final: bool, open_tag: str) -> tuple[str, int]:
    """Content before `open_tag` (a suffix that may begin it held back) and where the calls start (-1: none yet)."""
    at = text.find(open_tag)
    if at >= 0:
        return text[:at], at + len(open_tag)
    return (text if final else text[: len(text) - _held_prefix(text, open_tag)]), -1


class Qwen3CoderParser(PrefixParser):
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    _FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.S)
    _PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)

    def _scan(self, text: str, final: bool) -> tuple[str, Calls]:
        content, calls, pos = "", [], 0
        while True:
            shown, start = _content_around(text[pos:], final, self.OPEN)
            content += shown
            if start < 0:
                return content, calls
            end = text.find(self.CLOSE, pos + start)
            body = text[pos + start : end if end >= 0 else len(text)]
            calls += [(m[1].strip(), self._arguments(m[1].strip(), m[2])) for m in self._FUNCTION.finditer(body)]
            if end < 0:
                return content, calls  # an unclosed block: its complete functions only
            pos = end + len(self.CLOSE)

    def _arguments(self, name: str, body: str) -> str:
        props = self.schemas.get(name, {}).get("properties", {})
        args = {}
        for m in self._PARAM.finditer(body):
            key, raw = m[1].strip(), m[2]
            if props.get(key, {}).get("type") == "string":
                args[key] = raw
                continue
            try:
                args[key] = json.loads(raw)
            except ValueError:
                args[key] = raw
        return json.dumps(args, ensure_ascii=False)


class PythonicParser(PrefixParser):
    START, END = "<|python_start|>", "<|python_end|>"

    def _scan(self, text: str, final: bool) -> tuple[str, Calls]:
        head = text.lstrip()
        if head.startswith(self.START):
            head = head[len(self.START) :].lstrip()
        if not head or (self.START.startswith(head) and not final):
            return ("", []) if not final else (text, [])
        if head[0] != "[":
            return text, []
        calls = []
        for element in _list_elements(head):
            call = _python_call(element)
            if call is None:
                break
            calls.append(call)
        return ("", calls) if calls or not final else (text, [])


def _list_elements(text: str) -> list[str]:
    """The complete top-level elements of the Python list that opens `text` (strings and brackets respected)."""
    out, depth, start, quote, esc = [], 0, 1, None, False
    for i, ch in enumerate(text):
        if quote:
            esc, quote = (not esc and ch == "\\"), None if (ch == quote and not esc) else quote
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:  # the list closed
                out.append(text[start:i])
                return [e for e in out if e.strip()]
        elif ch == "," and depth == 1:
            out.append(text[start:i])
            start = i + 1
    return [e for e in out if e.strip()]


def _python_call(source: str) -> tuple[str, str] | None:
    try:
        node = ast.parse(source.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or node.args:
            return None
        name = ast.unparse(node.func)
        args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        return name, json.dumps(args, ensure_ascii=False)
    except (SyntaxError, ValueError, TypeError):
        return None


class MistralParser(PrefixParser):
    TAG, ARGS = "[TOOL_CALLS]", "[ARGS]"
    id_length = 9
    special_tokens = True

    def _scan(self, text: str, final: bool) -> tuple[str, Calls]:
        content, start = _content_around(text, final, self.TAG)
        if start < 0:
            return content, []
        rest = text[start:].lstrip()
        if rest.startswith("["):  # v3: one JSON array of calls
            return content, json_objects(rest[1:], ",")
        calls = []
        for part in rest.split(self.TAG):  # v11+: NAME[ARGS]{...}, each after its own tag
            name, sep, args = part.partition(self.ARGS)
            end = _value_end(args.lstrip()) if sep else None
            if end is None:
                break
            try:
                calls.append(as_call({"name": name.strip(), "arguments": json.loads(args.lstrip()[:end])}))
            except ValueError:
                break
        return content, calls


class HarmonyToolParser(PrefixParser):
    special_tokens = True

    def _scan(self, text: str, final: bool) -> tuple[str, Calls]:
        content, calls = "", []
        for m in harmony.split(text, final):
            if m.recipient is None:
                content += m.body
                continue
            if not (m.closed or m.body.strip()):
                continue  # cut before its arguments began
            args = m.body.strip() or "{}"
            try:
                json.loads(args)
            except ValueError:
                continue  # cut short, or not JSON: no call
            if m.closed or final:
                calls.append((m.recipient.removeprefix("functions."), args))
        return content, calls


class DeepSeekV3Parser(PrefixParser):
    BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
    _FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)

    def _scan(self, text: str, final: bool) -> tuple[str, Calls]:
        content, start = _content_around(text, final, self.BEGIN)
        if start < 0:
            return content, []
        block, _, after = text[start:].partition(self.END)
        calls = []
        for part in block.split(self.CALL)[1:]:
            body, closed, _ = part.partition(self.CALL_END)
            head, _, rest = body.partition(self.SEP)
            if not closed:
                break
            if head.strip() == "function":  # V3: the name on the first line, the arguments fenced
                name, _, rest = rest.partition("\n")
            else:
                name = head
            fenced = self._FENCE.match(rest)
            try:
                calls.append(as_call({"name": name.strip(), "arguments": json.loads(fenced[1] if fenced else rest)}))
            except ValueError:
                break
        if self.END in text[start:]:
            content += after if final else after[: len(after) - _held_prefix(after, self.BEGIN)]
        return content, calls
