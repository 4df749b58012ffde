"""The one place this front end meets the chat path's prompt rendering and its reply parsers
(serve/openai/reply.py over text/reasoning.py and text/tool_parsers.py): a chat request's prompt
and tool plan, the reply plan for its run, and a reply fed as text split into thinking, text and
tool-call pieces. Chat completions and Responses split with the same parsers, streamed or whole,
so one reply reads the same on every front end; when their API changes, this file follows."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.engine.sampling import SamplingParams
from trtserve.engine.vision import ImageInput
from trtserve.serve.openai.protocol import ChatCompletionRequest
from trtserve.serve.openai.reply import ReplyPlan, reply_plan, template_kwargs
from trtserve.serve.openai.serving import OpenAIServing, constrained
from trtserve.serve.openai.tools import ToolPlan
from trtserve.serve.telemetry.tracing import NO_SPAN, RequestSpan


@dataclass(frozen=True)
class Prompt:
    ids: list[int]  # the rendered conversation's token ids
    tools: ToolPlan  # what constrains and parses the reply's calls


async def render(
    chat: OpenAIServing, req: ChatCompletionRequest, variables: dict, effort: str | None, images: tuple[ImageInput, ...]
) -> Prompt:
    """The prompt the model's chat template makes of `req` (with the server's template defaults,
    then `variables`, then `effort` as reasoning_effort) and its loaded images, as /v1/chat/completions
    renders it."""
    cfg = chat.svc.config
    tools = req.tool_plan(getattr(chat.tok, "chat_template", None), cfg.tool_call_parser)
    kwargs = template_kwargs(cfg.default_chat_template_kwargs, variables, effort)
    return Prompt(await chat.encode_chat(req.messages, True, tools.template_tools(), kwargs, images=images), tools)


def plan_reply(
    chat: OpenAIServing, prompt: Prompt, params: SamplingParams, include_reasoning: bool
) -> tuple[ReplyPlan, SamplingParams]:
    """How the reply is read, and the params that keep what its parsers read (special tokens)."""
    thinks = chat.svc.engine.info.capabilities.thinking
    plan = reply_plan(
        chat.tok, chat.svc.config, prompt.tools, prompt.ids, constrained(params), include_reasoning, thinks
    )
    return plan, plan.params(params)


@dataclass(frozen=True)
class CallPiece:
    index: int  # the call's position among the reply's calls, from 0
    name: str | None  # set on the call's first piece only
    arguments: str  # the JSON text of its input this piece adds


@dataclass
class Piece:
    """What one piece of reply text adds: thinking, answer text, then call pieces."""

    thinking: str = ""
    text: str = ""
    calls: list[CallPiece] = field(default_factory=list)


class Splitter:
    """One reply, fed as text in arrival order (or whole, once, with final=True)."""

    def __init__(self, plan: ReplyPlan, span: RequestSpan = NO_SPAN):
        """span: the request's, which gets the reply's `reply parse` span when it is recorded."""
        self._stream = plan.stream(span)

    def feed(self, text: str, final: bool) -> Piece:
        thinking, answer, calls = self._stream.feed(text, final)
        return Piece(thinking, answer, [_piece(c) for c in calls])


def _piece(delta: dict) -> CallPiece:
    """A chat `tool_calls` delta: the first of a call has its id and name, the rest arguments."""
    fn = delta.get("function", {})
    return CallPiece(delta["index"], fn.get("name") if "id" in delta else None, fn.get("arguments") or "")
