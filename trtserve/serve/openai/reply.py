"""A chat reply split into its reasoning, its answer and its tool calls: the reasoning parser first
(text/reasoning.py: what is thought is never content, and a tool call written inside the thinking
is never parsed), then the tool-call parser over the answer. Chat completions and Responses feed the
same `ReplyStream`, streamed or whole, so both paths and both APIs give the same split."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.engine.thinking import ThinkingSpan
from trtserve.serve.errors import APIError
from trtserve.serve.openai.tools import ToolCallStream, ToolPlan
from trtserve.serve.telemetry.tracing import NO_SPAN, RequestSpan
from trtserve.text.reasoning import (
    REASONING_PARSERS,
    HarmonyReasoningParser,
    ReasoningParser,
    ThinkParser,
    opens_reasoning,
    reasoning_parser_of_template,
)

# Variables the chat template gets from trtserve itself; chat_template_kwargs may not replace them.
_RESERVED = {"messages", "tools", "documents", "add_generation_prompt", "chat_template"}


def template_kwargs(default: dict, asked: dict | None, effort: str | None) -> dict[str, Any]:
    """The chat template's extra variables: the server's defaults, the request's on top, and
    `reasoning_effort` (gpt-oss's templates read it)."""
    kwargs = {**default, **(asked or {})}
    bad = sorted(_RESERVED & kwargs.keys())
    if bad:
        raise APIError(
            400,
            f"chat_template_kwargs may not set {', '.join(bad)}; send them as request fields",
            "chat_template_kwargs",
        )
    if effort is not None:
        kwargs.setdefault("reasoning_effort", effort)
    return kwargs


@dataclass(frozen=True)
class ReplyPlan:
    """How one request's reply is read."""

    tools: ToolPlan
    reasoning: str  # a REASONING_PARSERS name; "none": the whole reply is the answer
    starts_inside: bool  # the prompt opened `<think>`: the reply begins inside the reasoning
    include_reasoning: bool = True  # false: reasoning is split off and dropped
    # the `<think>` and `</think>` tags' token ids, for a think-tag parser on an engine that reads a
    # ThinkingSpan (its `thinking` capability); None: no span is sent
    tags: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @property
    def thinks(self) -> bool:
        return self.reasoning != "none"

    def thinking_span(self, budget: int | None, guided: GuidedDecoding | None) -> ThinkingSpan | None:
        """What the engine needs to close the thinking at `budget` tokens and to start a grammar after
        it. None without think tags, or with a grammar over the whole reply (`guided_grammar`), which
        owns the thinking too. A budget the engine cannot enforce is a 400."""
        if self.tags is None and budget is not None and self.reasoning == "think":
            raise APIError(400, "this engine enforces no thinking budget (the torch backend does); leave it out")
        if self.tags is None or (guided is not None and guided.kind == "grammar"):
            return None
        return ThinkingSpan(
            open_ids=self.tags[0], close_ids=self.tags[1], starts_inside=self.starts_inside, budget=budget
        )

    def reasoning_tokens(self, tok, token_ids: list[int], skip_special_tokens: bool) -> int:
        """How many of a reply's tokens the reasoning parser puts in its reasoning: those whose text lies
        wholly inside its reasoning spans (tags excluded), token-exact."""
        if not self.thinks or not token_ids:
            return 0
        lengths = PrefixLengths(tok, token_ids, skip_special_tokens)
        parser = REASONING_PARSERS[self.reasoning](self.starts_inside)
        return sum(lengths.tokens_within(a, b) for a, b in parser.spans(lengths.text))

    def usage_details(self, tok, outputs, skip_special_tokens: bool) -> dict:
        """Chat usage's `completion_tokens_details` for a thinking model's outputs (RequestOutput)."""
        if not self.thinks:
            return {}
        n = sum(self.reasoning_tokens(tok, c.token_ids, skip_special_tokens) for o in outputs for c in o.outputs)
        return {"completion_tokens_details": {"reasoning_tokens": n}}

    def params(self, params: SamplingParams) -> SamplingParams:
        """The sampling params, keeping special tokens in the text where a parser reads them."""
        if REASONING_PARSERS[self.reasoning].special_tokens or self.tools.special_tokens:
            return params.model_copy(update={"skip_special_tokens": False})
        return params

    def stream(self, span: RequestSpan = NO_SPAN) -> ReplyStream:
        """One sequence's split; `span`: the request's, which gets a `reply parse` span when it is recorded and
        a reasoning or tool-call parser reads the reply."""
        return ReplyStream(self, span)


def reply_plan(
    tok,
    config,
    tools: ToolPlan,
    prompt_ids: list[int],
    constrained: bool,
    include: bool = True,
    engine_thinks: bool = True,
) -> ReplyPlan:
    """The parsers for a request: the server's (`--reasoning-parser`), else the chat template's.
    `constrained`: a grammar shapes the answer. With think tags the engine applies it after the
    thinking (the request's ThinkingSpan); with harmony's channels from the first token, so that
    reply holds no reasoning and is read as the answer only. `engine_thinks`: the engine reads a
    ThinkingSpan (its `thinking` capability); without, a grammar applies from the first token there too."""
    template = getattr(tok, "chat_template", None)
    name = config.reasoning_parser or reasoning_parser_of_template(template)
    think = REASONING_PARSERS[name] is ThinkParser and engine_thinks
    if constrained and not think:
        name = "none"
    tail = tok.decode(prompt_ids[-16:], skip_special_tokens=False) if name != "none" else ""
    tags = (_ids(tok, ThinkParser.OPEN), _ids(tok, ThinkParser.CLOSE)) if think else None
    return ReplyPlan(tools, name, opens_reasoning(tail, name), include, tags)


def _ids(tok, text: str) -> tuple[int, ...]:
    return tuple(tok.encode(text, add_special_tokens=False))


class PrefixLengths:
    """The characters each prefix of a reply's tokens decodes to, computed as asked (a binary search
    asks O(log n) of them)."""

    def __init__(self, tok, token_ids: list[int], skip_special_tokens: bool):
        self.tok, self.ids, self.skip = tok, token_ids, skip_special_tokens
        self._lengths = {0: 0}
        self.text = self._decode(len(token_ids))

    def _decode(self, k: int) -> str:
        return self.tok.decode(self.ids[:k], skip_special_tokens=self.skip)

    def length(self, k: int) -> int:
        if k not in self._lengths:
            self._lengths[k] = len(self._decode(k))
        return self._lengths[k]

    def _first(self, chars: int) -> int:
        """The fewest tokens whose text reaches `chars` characters (all of them if none does)."""
        lo, hi = 0, len(self.ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.length(mid) >= chars:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def tokens_within(self, start: int, end: int) -> int:
        """Tokens whose text lies wholly in characters [start, end)."""
        first = self._first(start)  # tokens from `first` on start at or after `start`
        last = self._first(end + 1)  # tokens before `last - 1` end at or before `end`
        if self.length(last) <= end:  # every token ends by `end`
            last += 1
        return max(0, last - 1 - first)


class ReplyStream:
    """One sequence's reply, fed as text: (reasoning, content, tool_call deltas) each piece adds."""

    def __init__(self, plan: ReplyPlan, span: RequestSpan = NO_SPAN):
        self.plan = plan
        cls = REASONING_PARSERS[plan.reasoning]
        if issubclass(cls, HarmonyReasoningParser):
            self.reasoner: ReasoningParser = cls(plan.starts_inside, keep_calls=plan.tools.active)
        else:
            self.reasoner = cls(plan.starts_inside)
        self.tools: ToolCallStream | None = plan.tools.parser() if plan.tools.active else None
        self.reasoning = ""  # all of it so far
        self.span = span
        # a `reply parse` span where a parser reads the reply; no clock is read for an untraced one
        self.traced = span.recording and (plan.thinks or self.tools is not None)
        self.began: float | None = None  # the first piece was fed (when traced)
        self.busy_s = 0.0  # seconds in the parsers (when traced)
        self.pieces = 0
        self.content_chars = 0

    def feed(self, text: str, final: bool) -> tuple[str, str, list[dict]]:
        if not self.traced:
            return self._split(text, final)
        began = time.monotonic()
        if self.began is None:
            self.began = began
        split = self._split(text, final)
        ended = time.monotonic()
        self.busy_s += ended - began
        if final:
            self.span.record("reply parse", self.began, ended, self._attributes)
        return split

    def _split(self, text: str, final: bool) -> tuple[str, str, list[dict]]:
        self.pieces += 1
        reasoning, content = self.reasoner.feed(text) if text else ("", "")
        if final:
            more_r, more_c = self.reasoner.finish()
            reasoning, content = reasoning + more_r, content + more_c
        self.reasoning += reasoning
        if not self.plan.include_reasoning:
            reasoning = ""
        calls: list[dict] = []
        if self.tools is not None:
            content, calls = self.tools.feed(content, final)
        self.content_chars += len(content)
        return reasoning, content, calls

    def _attributes(self) -> dict:
        """The `reply parse` span's: the parsers that read the reply and what they found in it."""
        attrs = {
            "trtserve.parse.reasoning_parser": self.plan.reasoning,
            "trtserve.parse.pieces": self.pieces,
            "trtserve.parse.reasoning_chars": len(self.reasoning),
            "trtserve.parse.content_chars": self.content_chars,
            "trtserve.parse.busy_s": self.busy_s,
        }
        if self.tools is not None:
            attrs["trtserve.parse.tool_parser"] = self.plan.tools.family
            attrs["trtserve.parse.tool_calls"] = len(self.tools.calls)
        return attrs

    @property
    def has_calls(self) -> bool:
        return self.tools is not None and bool(self.tools.calls)

    def message(self, text: str) -> dict:
        """The whole reply as an assistant message."""
        reasoning, content, _ = self.feed(text, final=True)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if self.plan.thinks and self.plan.include_reasoning:
            msg["reasoning"] = msg["reasoning_content"] = reasoning or None
        if self.has_calls:
            msg["content"] = content or None
            msg["tool_calls"] = self.tools.tool_calls()
        return msg

    def delta(self, text: str, final: bool) -> dict:
        """A streamed chat delta: reasoning, content shown so far, and the calls' `tool_calls` deltas."""
        reasoning, content, calls = self.feed(text, final)
        delta: dict[str, Any] = {}
        if reasoning:
            delta["reasoning"] = delta["reasoning_content"] = reasoning
        if content or (not reasoning and not calls and not final):
            delta["content"] = content
        if calls:
            delta["tool_calls"] = calls
        return delta
