"""Incremental detokenization that never emits broken UTF-8, and stop strings across tokens.

Decoding a window of recent tokens and emitting only what extends the previous window's text
(as TGI and vLLM do) keeps per-token cost constant and lets the tokenizer handle leading-space
rules; text ending in U+FFFD is held back until the character is complete.
"""

from __future__ import annotations

from collections.abc import Sequence


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_ids: Sequence[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        # Start the window inside the prompt so the first output token decodes in context, at a
        # token where the prompt's tail decodes cleanly (not inside a run of byte tokens).
        start = max(len(prompt_ids) - 4, 0)
        while start > 0 and len(prompt_ids) - start < 16 and "\ufffd" in self._decode(prompt_ids[start:]):
            start -= 1
        tail = list(prompt_ids[start:])
        self.ids: list[int] = tail if "\ufffd" not in self._decode(tail) else []
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self._emitted_any = False

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip, clean_up_tokenization_spaces=False)

    def add(self, token_ids: Sequence[int]) -> str:
        """Append tokens; return the new complete text (maybe empty)."""
        self.ids.extend(token_ids)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return full[len(prefix) :]
        return ""

    def flush(self) -> str:
        """At the end: whatever is held back, even an incomplete character (as the full decode has it)."""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        if full.startswith(prefix):
            return full[len(prefix) :]
        # The window began inside a byte run that never completed: mark the broken end.
        return "\ufffd"


class StopStringMatcher:
    """Holds back text that could be the start of a stop string; cuts the text at a match."""

    def __init__(self, stops: Sequence[str], include_stop: bool = False):
        self.stops = list(stops)
        self.include = include_stop
        self.held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Return text safe to emit now. After a match, `matched` is set and nothing more is emitted."""
        if self.matched is not None or not self.stops:
            return "" if self.matched is not None else text
        buf = self.held + text
        hits = [(buf.find(s), s) for s in self.stops if s in buf]
        if hits:
            pos, stop = min(hits)
            self.matched, self.held = stop, ""
            return buf[: pos + (len(stop) if self.include else 0)]
        keep = max((k for s in self.stops for k in range(1, len(s)) if buf.endswith(s[:k])), default=0)
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        out, self.held = self.held, ""
        return "" if self.matched is not None else out
