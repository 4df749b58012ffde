"""A reply's text, as it arrives, turned into Anthropic content blocks (`thinking` with a signature,
`text`, `tool_use`) and the stream events that build them: `content_block_start`, deltas
(`thinking_delta` then `signature_delta`, `text_delta`, `input_json_delta`), `content_block_stop`.
Every delta goes to the block open at that moment, whose type it matches; indices count from 0
without gaps. A non-streamed reply feeds the whole text once, so both paths build the same blocks."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid

from trtserve.serve.anthropic.split import CallPiece, Splitter


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def signature(thinking: str) -> str:
    """A thinking block's signature: a digest of its text (this server checks none it is sent back)."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


class BlockBuilder:
    """The content blocks of one reply; `feed` returns the events each piece of text adds."""

    def __init__(self, splitter: Splitter, omit_thinking: bool = False, parallel: bool = True):
        """omit_thinking: thinking blocks keep their signature, not their text (`display: "omitted"`);
        parallel false: calls after the first are dropped (`disable_parallel_tool_use`)."""
        self.splitter, self.omit_thinking, self.parallel = splitter, omit_thinking, parallel
        self.blocks: list[dict] = []
        self._open: dict | None = None  # the block still being written, if any
        self._json: dict[int, str] = {}  # tool_use block index -> its input's JSON text so far
        self._calls: dict[int, dict] = {}  # the reply's call index -> its tool_use block
        self._thought = ""  # the open thinking block's text, kept for its signature when omitted

    @property
    def has_calls(self) -> bool:
        return bool(self._calls)

    def feed(self, text: str, final: bool) -> list[dict]:
        out: list[dict] = []
        piece = self.splitter.feed(text, final)
        if piece.thinking:
            self._thinking(piece.thinking, out)
        if piece.text:
            self._text(piece.text, out)
        for call in piece.calls:
            self._call(call, out)
        if final:
            self._close(out)
        return out

    def _thinking(self, text: str, out: list[dict]) -> None:
        block = self._current("thinking", out) or self._start(
            {"type": "thinking", "thinking": "", "signature": ""}, out
        )
        self._thought += text
        if self.omit_thinking:
            return
        block["thinking"] += text
        out.append(_delta(self._index(block), {"type": "thinking_delta", "thinking": text}))

    def _text(self, text: str, out: list[dict]) -> None:
        block = self._current("text", out) or self._start({"type": "text", "text": ""}, out)
        block["text"] += text
        out.append(_delta(self._index(block), {"type": "text_delta", "text": text}))

    def _call(self, piece: CallPiece, out: list[dict]) -> None:
        """A call's first piece (it has the name) opens its tool_use block; the rest go to that block."""
        if piece.name is not None:
            if self._calls and not self.parallel:
                return
            self._close(out)
            block = {"type": "tool_use", "id": new_id("toolu"), "name": piece.name, "input": {}}
            self._calls[piece.index] = self._start(block, out)
        block = self._calls.get(piece.index)
        if block is None or not piece.arguments:
            return
        i = self._index(block)
        self._json[i] = self._json.get(i, "") + piece.arguments
        if block is self._open:  # always, while the parsers send each call whole
            out.append(_delta(i, {"type": "input_json_delta", "partial_json": piece.arguments}))

    def _current(self, kind: str, out: list[dict]) -> dict | None:
        """The open block if it is of `kind`; otherwise the open block is closed (None)."""
        if self._open is not None and self._open["type"] == kind:
            return self._open
        self._close(out)
        return None

    def _start(self, block: dict, out: list[dict]) -> dict:
        self.blocks.append(block)
        self._open = block
        out.append({"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": dict(block)})
        return block

    def _close(self, out: list[dict]) -> None:
        block, self._open = self._open, None
        if block is None:
            return
        i = self._index(block)
        if block["type"] == "thinking":
            block["signature"] = signature(self._thought)
            self._thought = ""
            out.append(_delta(i, {"type": "signature_delta", "signature": block["signature"]}))
        elif block["type"] == "tool_use":
            block["input"] = json.loads(self._json.get(i) or "{}")  # the parsers send only whole calls
        out.append({"type": "content_block_stop", "index": i})

    def _index(self, block: dict) -> int:
        return next(i for i, b in enumerate(self.blocks) if b is block)


def _delta(index: int, delta: dict) -> dict:
    return {"type": "content_block_delta", "index": index, "delta": delta}
