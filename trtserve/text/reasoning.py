"""A reasoning model's reply split into its reasoning and its answer, fed incrementally.

Every parser here is a pure function of the text so far, `_split(text, final) -> (reasoning,
content)`, whose results for a prefix are prefixes of its results for the whole text; `feed`
returns only what each call adds. So a stream's reasoning and content deltas concatenate to
exactly what the whole text gives at once, however the text was chunked (tested with hypothesis
in tests/unit/test_reasoning_parsers.py).

Parsers (vLLM's `--reasoning-parser` names where they mean the same):
- think (aliases qwen3, deepseek_r1, smollm3): `<think>...</think>` then the answer. A template
  that opens `<think>` in the prompt (DeepSeek-R1 distills, Qwen3 thinking-only) starts the reply
  inside the reasoning; a reply never closed holds reasoning only.
- harmony (alias gpt_oss): gpt-oss's channels; `analysis` is reasoning, `final` (and commentary
  without a recipient) is the answer, a message to `functions.NAME` is a tool call, passed on as
  its harmony text for the harmony tool-call parser.
- none: everything is the answer.
"""

from __future__ import annotations

from trtserve.text import harmony


class ReasoningParser:
    """Base: no reasoning. Feed text, get (reasoning, content) each call adds; `finish` the rest."""

    name = "none"
    special_tokens = False  # the parser reads special tokens (the text must keep them)

    def __init__(self, starts_inside: bool = False):
        self.starts_inside = starts_inside
        self._text = ""
        self._sent = (0, 0)  # characters of reasoning and content returned so far

    def feed(self, text: str) -> tuple[str, str]:
        self._text += text
        return self._delta(False)

    def finish(self) -> tuple[str, str]:
        return self._delta(True)

    def parse(self, text: str) -> tuple[str, str]:
        """The whole text at once: (reasoning, content)."""
        self._text = text
        return self._split(text, True)

    def _delta(self, final: bool) -> tuple[str, str]:
        reasoning, content = self._split(self._text, final)
        (r, c), self._sent = self._sent, (len(reasoning), len(content))
        return reasoning[r:], content[c:]

    def _split(self, text: str, final: bool) -> tuple[str, str]:
        return "", text

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the whole reply's reasoning lies: [start, end) character ranges of `text`, tags
        excluded (what `parse` returns, before its whitespace is stripped)."""
        return []


class ThinkParser(ReasoningParser):
    """`<think>reasoning</think>answer`; reasoning and the answer's start are stripped of whitespace."""

    name = "think"
    OPEN, CLOSE = "<think>", "</think>"

    def _split(self, text: str, final: bool) -> tuple[str, str]:
        head = text.lstrip()
        if head.startswith(self.OPEN):  # opened in the reply (or again, after the prompt opened it)
            start = len(text) - len(head) + len(self.OPEN)
        elif not final and self.OPEN.startswith(head):
            return "", ""  # only whitespace, or what may begin the tag: undecided
        elif self.starts_inside:
            start = 0
        else:
            return "", text  # the model did not think
        end = text.find(self.CLOSE, start)
        if end < 0:
            reasoning = text[start:]
            if not final:
                reasoning = reasoning[: len(reasoning) - harmony.held(reasoning, (self.CLOSE,))]
            return reasoning.strip(), ""
        return text[start:end].strip(), text[end + len(self.CLOSE) :].lstrip()

    def spans(self, text: str) -> list[tuple[int, int]]:
        head = text.lstrip()
        if head.startswith(self.OPEN):
            start = len(text) - len(head) + len(self.OPEN)
        elif self.starts_inside:
            start = 0
        else:
            return []
        end = text.find(self.CLOSE, start)
        return [(start, len(text) if end < 0 else end)]


class HarmonyReasoningParser(ReasoningParser):
    """gpt-oss: `analysis` is reasoning; messages to a recipient go on, as written, to the tool parser
    (`keep_calls`), or are dropped when the request has no tools to call."""

    name = "harmony"
    special_tokens = True

    def __init__(self, starts_inside: bool = False, keep_calls: bool = True):
        super().__init__(starts_inside)
        self.keep_calls = keep_calls

    def _split(self, text: str, final: bool) -> tuple[str, str]:
        reasoning, content = [], []
        for m in harmony.split(text, final):
            if m.recipient is not None:
                if self.keep_calls:
                    end = "<|call|>" if m.closed else ""
                    content.append(f"{harmony.START}{m.raw_header}{harmony.MESSAGE}{m.body}{end}")
            elif m.channel == "analysis":
                reasoning.append(m.body)
            else:
                content.append(m.body)
        return "\n\n".join(reasoning), "".join(content)

    def spans(self, text: str) -> list[tuple[int, int]]:
        out, pos = [], 0
        for m in harmony.split(text, True):
            at = text.find(m.body, pos)
            if m.channel == "analysis" and m.recipient is None and m.body:
                out.append((at, at + len(m.body)))
            pos = at + len(m.body)
        return out


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "none": ReasoningParser,
    "think": ThinkParser,
    "qwen3": ThinkParser,
    "deepseek_r1": ThinkParser,
    "smollm3": ThinkParser,
    "harmony": HarmonyReasoningParser,
    "gpt_oss": HarmonyReasoningParser,
}


def reasoning_parser_of_template(template: str | None) -> str:
    """The reasoning parser a chat template's text implies: harmony's channels, `<think>`, or none."""
    if not template:
        return "none"
    if "<|channel|>" in template:
        return "harmony"
    if "<think>" in template or "</think>" in template:
        return "think"
    return "none"


def opens_reasoning(prompt_tail: str, parser: str) -> bool:
    """Whether a prompt (its decoded tail) leaves the reply inside an opened `<think>` block."""
    return REASONING_PARSERS[parser] is ThinkParser and prompt_tail.rstrip().endswith(ThinkParser.OPEN)
