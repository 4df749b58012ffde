"""gpt-oss's harmony format, split into messages: a pure function of the text so far.

A reply is a run of messages, each a header and a body:

    <|channel|>analysis<|message|>thinking...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>The answer.<|return|>

The prompt ends with `<|start|>assistant`, so the reply opens inside the first header. The text
needs the special tokens (`skip_special_tokens=False`). `split(text, final)` returns the messages
read so far; a body still being written is cut before anything that may begin an end token, so
the messages of a prefix are a prefix of the messages of the whole text (what streaming needs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z_]+)")


@dataclass
class HarmonyMessage:
    channel: str | None  # analysis | commentary | final; None: text outside any header
    recipient: str | None  # e.g. "functions.get_weather" for a tool call
    body: str  # as much as is certain so far
    closed: bool  # its end token was read
    raw_header: str  # the header as written, from after `<|start|>` (or the reply's start) to `<|message|>`


def held(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that could begin one of `tags`."""
    for k in range(min(len(text), max(len(t) for t in tags) - 1), 0, -1):
        if any(t.startswith(text[-k:]) for t in tags):
            return k
    return 0


def split(text: str, final: bool) -> list[HarmonyMessage]:
    """The messages of `text`; `final`: the text is complete (an unfinished header is dropped).
    Text outside any header (before the first `<|`) is a message of no channel."""
    out: list[HarmonyMessage] = []
    pos = 0
    while pos < len(text):
        mark = text.find("<|", pos)
        if mark != pos:  # plain text up to the next markup
            chunk = text[pos:] if mark < 0 else text[pos:mark]
            if mark < 0 and not final:
                chunk = chunk[: len(chunk) - held(chunk, ("<|",))]
            if chunk:
                out.append(HarmonyMessage(None, None, chunk, mark >= 0, ""))
            if mark < 0:
                break
            pos = mark
        at = text.find(MESSAGE, pos)
        if at < 0:
            break  # a header still being written
        header = text[pos:at]
        header = header[len(START) :] if header.startswith(START) else header
        channel, recipient = _CHANNEL.search(header), _RECIPIENT.search(header)
        name, to = (channel[1] if channel else "final"), (recipient[1] if recipient else None)
        body_start = at + len(MESSAGE)
        ends = [(i, e) for i, e in ((text.find(e, body_start), e) for e in ENDS) if i >= 0]
        if not ends:
            body = text[body_start:]
            if not final:
                body = body[: len(body) - held(body, ENDS)]
            out.append(HarmonyMessage(name, to, body, False, header))
            break
        end, tag = min(ends)
        out.append(HarmonyMessage(name, to, text[body_start:end], True, header))
        pos = end + len(tag)
    return out
