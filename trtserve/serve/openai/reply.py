"""A chat reply split into its reasoning, its answer and its tool calls: the reasoning parser first
(text/reasoning.py: what is thought is never content, and a tool call written inside the thinking
is never parsed), then the tool-call parser over the answer. Chat completions and Responses feed the
same `ReplyStream`, streamed or whole, so both paths and both APIs give the same split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtserve.engine.sampling import SamplingParams
from trtserve.serve.errors import APIError
from trtserve.serve.openai.tools import ToolCallStream, ToolPlan
from trtserve.text.reasoning import (
    REASONING_PARSERS,
    HarmonyReasoningParser,
    ReasoningParser,
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

    @property
    def thinks(self) -> bool:
        return self.reasoning != "none"

    def params(self, params: SamplingParams) -> SamplingParams:
        """The sampling params, keeping special tokens in the text where a parser reads them."""
        if REASONING_PARSERS[self.reasoning].special_tokens or self.tools.special_tokens:
            return params.model_copy(update={"skip_special_tokens": False})
        return params

    def stream(self) -> ReplyStream:
        return ReplyStream(self)


def reply_plan(
    tok, config, tools: ToolPlan, prompt_ids: list[int], constrained: bool, include: bool = True
) -> ReplyPlan:
    """The parsers for a request: the server's (`--reasoning-parser`), else the chat template's.
    `constrained`: a grammar shapes the output from its first token (the engine applies it there),
    so the reply holds no reasoning and is read as the answer only."""
    template = getattr(tok, "chat_template", None)
    name = config.reasoning_parser or reasoning_parser_of_template(template)
    if constrained:
        name = "none"
    tail = tok.decode(prompt_ids[-16:], skip_special_tokens=False) if name != "none" else ""
    return ReplyPlan(tools, name, opens_reasoning(tail, name), include)


class ReplyStream:
    """One sequence's reply, fed as text: (reasoning, content, tool_call deltas) each piece adds."""

    def __init__(self, plan: ReplyPlan):
        self.plan = plan
        cls = REASONING_PARSERS[plan.reasoning]
        if issubclass(cls, HarmonyReasoningParser):
            self.reasoner: ReasoningParser = cls(plan.starts_inside, keep_calls=plan.tools.active)
        else:
            self.reasoner = cls(plan.starts_inside)
        self.tools: ToolCallStream | None = plan.tools.parser() if plan.tools.active else None
        self.reasoning = ""  # all of it so far

    def feed(self, text: str, final: bool) -> tuple[str, str, list[dict]]:
        reasoning, content = self.reasoner.feed(text) if text else ("", "")
        if final:
            more_r, more_c = self.reasoner.finish()
            reasoning, content = reasoning + more_r, content + more_c
        self.reasoning += reasoning
        if not self.plan.include_reasoning:
            reasoning = ""
        if self.tools is None:
            return reasoning, content, []
        content, calls = self.tools.feed(content, final)
        return reasoning, content, calls

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
