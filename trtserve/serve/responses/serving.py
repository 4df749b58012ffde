"""Responses serving logic over the shared generation path: a request becomes the chat request it
means (messages, tools, structured output, sampling) and runs through the OpenAI front end's own
functions, so the same conversation gets the same prompt tokens and the same greedy text as
/v1/chat/completions. It answers a body or its typed events; the routes wrap them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from pydantic import ValidationError
from starlette.requests import Request as HTTPRequest

from trtserve.engine.errors import UserError
from trtserve.serve import speculative
from trtserve.serve.context import RequestContext
from trtserve.serve.errors import APIError
from trtserve.serve.generation import GenerationRun
from trtserve.serve.group import closing, collect_all, merged, release
from trtserve.serve.images import load_images
from trtserve.serve.openai.content import image_sources
from trtserve.serve.openai.protocol import ChatCompletionRequest
from trtserve.serve.openai.reply import ReplyPlan, reply_plan, template_kwargs
from trtserve.serve.openai.serving import OpenAIServing, constrained
from trtserve.serve.responses import store as rows
from trtserve.serve.responses.conversation import chat_messages, dump_items, parse_items
from trtserve.serve.responses.output import Events, OutputBuilder, new_id, sse, usage
from trtserve.serve.responses.protocol import ResponsesRequest
from trtserve.serve.responses.registry import Responses
from trtserve.serve.telemetry.timings import metrics_field
from trtserve.text.outputs import RequestOutput

Answer = dict | AsyncIterator[str]
_STATUS = {"stop": "completed", "length": "incomplete"}  # finish_reason -> response status


class Turn:
    """One admitted response: its request, its run and the body that describes it."""

    def __init__(self, rid: str, req: ResponsesRequest, run: GenerationRun, plan: ReplyPlan, model: str, stored: bool):
        self.id, self.req, self.run, self.plan, self.model, self.stored = rid, req, run, plan, model, stored
        self.reasoning_tokens: Callable[[list[int]], int] = lambda ids: 0  # of an output's token ids
        self.created_at = rows.now()
        self.context: list[dict] = []  # the conversation's input items, stored with the response

    def body(self, status: str, output: list[dict], out: RequestOutput | None = None, error: dict | None = None):
        r = self.req
        reason = "max_output_tokens" if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": r.background,
            "completed_at": rows.now() if status in ("completed", "incomplete") else None,
            "error": error,
            "incomplete_details": {"reason": reason} if reason else None,
            "instructions": r.instructions,
            "max_output_tokens": r.max_output_tokens,
            "metadata": r.metadata or {},
            "model": self.model,
            "output": output,
            "parallel_tool_calls": r.parallel_tool_calls,
            "previous_response_id": r.previous_response_id,
            "reasoning": self.reasoning(),
            "store": self.stored,
            "temperature": 1.0 if r.temperature is None else r.temperature,
            "text": {"format": r.text.format.model_dump(by_alias=True) if r.text else {"type": "text"}},
            "tool_choice": self._tool_choice(),
            "tools": [t.model_dump(exclude_none=True) for t in r.tools or []],
            "top_p": 1.0 if r.top_p is None else r.top_p,
            "truncation": "disabled",
            "usage": _usage(out, r.return_spec_decode_stats, self.reasoning_tokens) if out is not None else None,
            "user": r.user,
            "receipt": self.run.receipt_id,
        }

    def reasoning(self) -> dict | None:
        r = self.req.reasoning
        return {"effort": r.effort, "summary": r.summary} if r is not None else None

    def _tool_choice(self):
        choice = self.req.tool_choice
        if choice is None:
            return "auto" if self.req.tools else "none"
        return choice if isinstance(choice, str) else choice.model_dump()


class ResponsesServing:
    def __init__(self, chat: OpenAIServing, responses: Responses):
        self.chat, self.responses = chat, responses
        self.store = responses.store

    async def create(self, req: ResponsesRequest, http: HTTPRequest | None, context: RequestContext) -> Answer:
        stored = self._stored(req)
        history = await self._history(req)
        turn_items = dump_items(req.items())
        turn = await self._start(req, history + turn_items, stored, context)
        turn.context = history + turn_items
        if req.stream:
            return self._stream(turn)
        try:
            if req.background:
                return await self._background(turn)
            (out,) = await collect_all([turn.run], http)
        except BaseException:
            release([turn.run])  # admitted but never run (a refusal, a store error): its ticket back
            raise
        builder = OutputBuilder(turn.plan, Events(), turn.run.context.span)
        c = out.outputs[0]
        builder.feed(c.text, final=True, status=_item_status(c.finish_reason))
        body = turn.body(_STATUS.get(c.finish_reason, "incomplete"), builder.items, out)
        await self._save(turn, body)
        return body

    # ---- the request as chat -----------------------------------------------------------------
    def _stored(self, req: ResponsesRequest) -> bool:
        if self.store is not None:
            return req.store is not False
        if req.store:
            raise APIError(400, "this server keeps no state (--state-dir none); send store: false", "store")
        if req.background:
            raise APIError(400, "background responses are stored, and this server keeps no state", "background")
        return False

    async def _history(self, req: ResponsesRequest) -> list[dict]:
        """The previous response's conversation and output, as input items (not its instructions)."""
        prev_id = req.previous_response_id
        if prev_id is None:
            return []
        prev = await self.responses.get(prev_id)
        if prev is None:
            raise APIError(404, f"previous response {prev_id!r} not found", "previous_response_id")
        if prev.body["status"] in rows.UNFINISHED:
            raise APIError(400, f"previous response {prev_id!r} has not finished yet", "previous_response_id")
        return prev.context + prev.body["output"]

    async def _start(self, req: ResponsesRequest, items: list[dict], stored: bool, context: RequestContext) -> Turn:
        tok = self.chat.tok
        try:
            chat = ChatCompletionRequest(
                model=req.model,
                messages=chat_messages(req.instructions, parse_items(items)),
                tools=req.chat_tools(),
                tool_choice=req.chat_tool_choice(),
                parallel_tool_calls=req.parallel_tool_calls,
                response_format=req.response_format(),
                **req.model_dump(include=_SAMPLING, exclude_none=True),
            )
        except ValidationError as err:  # the request was validated already; this names what still failed
            e = err.errors()[0]
            raise APIError(400, f"{'.'.join(map(str, e['loc']))}: {e['msg']}") from None
        cfg = self.chat.svc.config
        plan = chat.tool_plan(getattr(tok, "chat_template", None), cfg.tool_call_parser)
        effort = req.reasoning.effort if req.reasoning is not None else None
        kwargs = template_kwargs(cfg.default_chat_template_kwargs, req.chat_template_kwargs, effort)
        images = await load_images(self.chat.svc, [s for m in chat.messages for s in image_sources(m)])
        ids = await self.chat.encode_chat(chat.messages, True, plan.template_tools(), kwargs, images=images)
        params = chat.sampling_params(self.chat.max_tokens(req.max_output_tokens, len(ids)), None, guided=plan.guided())
        reply = reply_plan(
            tok, cfg, plan, ids, constrained(params), True, self.chat.svc.engine.info.capabilities.thinking
        )
        params = reply.params(params)
        rid = new_id("resp")
        options = req.request_options(
            client_id=rid, thinking_span=reply.thinking_span(chat.thinking_token_budget, params.guided), images=images
        )
        run = self.chat.svc.start(ids, params, options, timeout=req.timeout, context=context)
        turn = Turn(rid, req, run, reply, self.chat.served_name, stored)
        turn.reasoning_tokens = lambda token_ids: reply.reasoning_tokens(tok, token_ids, params.skip_special_tokens)
        return turn

    async def _save(self, turn: Turn, body: dict) -> None:
        if turn.stored:
            await self.store.call(rows.put, self.store, body, turn.context, turn.req.background)

    # ---- stream: true ------------------------------------------------------------------------
    def _stream(self, turn: Turn) -> AsyncIterator[str]:
        return closing(self._events(turn), [turn.run])

    async def _events(self, turn: Turn) -> AsyncIterator[str]:
        ev = Events()
        builder = OutputBuilder(turn.plan, ev, turn.run.context.span)
        start = turn.body("in_progress", [])
        yield sse(ev("response.created", response=start))
        yield sse(ev("response.in_progress", response=start))
        finish = None
        try:
            async for _, d in merged([turn.run]):
                finish = d.finish_reason or finish
                for e in builder.feed(d.text, d.finish_reason is not None, _item_status(d.finish_reason)):
                    yield sse(e)
        except (APIError, UserError) as err:  # after the stream began: the response failed
            body = turn.body("failed", builder.items, turn.run.output, {"code": "server_error", "message": str(err)})
            await self._save(turn, body)
            yield sse(ev("response.failed", response=body))
            return
        if not builder.done:  # the run ended without a finish reason: close what is open
            for e in builder.feed("", True):
                yield sse(e)
        status = _STATUS.get(finish, "incomplete")
        body = turn.body(status, builder.items, turn.run.output)
        await self._save(turn, body)  # stored before the client hears it finished: a GET then finds it
        yield sse(ev("response.completed" if status == "completed" else "response.incomplete", response=body))

    # ---- background: true --------------------------------------------------------------------
    async def _background(self, turn: Turn) -> dict:
        body = turn.body("in_progress", [])
        await self._save(turn, body)
        task = asyncio.ensure_future(self._run_in_background(turn))
        self.responses.running(turn.id, task)
        return body

    async def _run_in_background(self, turn: Turn) -> None:
        try:
            (out,) = await collect_all([turn.run])
            builder = OutputBuilder(turn.plan, Events(), turn.run.context.span)
            c = out.outputs[0]
            builder.feed(c.text, final=True, status=_item_status(c.finish_reason))
            body = turn.body(_STATUS.get(c.finish_reason, "incomplete"), builder.items, out)
        except asyncio.CancelledError:
            return  # cancelled: the cancel wrote the row
        except (APIError, UserError) as err:
            body = turn.body("failed", [], None, {"code": "server_error", "message": str(err)})
        await self.store.call(rows.finish, self.store, body)


# Fields that mean the same on both APIs, passed through to the chat request as they are.
_SAMPLING = {
    "temperature",
    "top_p",
    "seed",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "timeout",
    "priority",
    "user",
    "guided_grammar",
    "thinking_token_budget",
}


def _item_status(finish: str | None) -> str:
    return "incomplete" if finish == "length" else "completed"


def _usage(out: RequestOutput, spec_decode: bool, reasoning: Callable[[list[int]], int]) -> dict:
    """`spec_decode`: with the speculative-decoding counts the client asked for; `reasoning`: how many of
    an output's tokens are reasoning."""
    done = sum(len(c.token_ids) for c in out.outputs)
    thought = sum(reasoning(c.token_ids) for c in out.outputs)
    body = usage(len(out.prompt_token_ids), done, out.num_cached_tokens, thought)
    if spec_decode:
        body["spec_decode"] = speculative.stats_field(c.spec for c in out.outputs)
    if (timings := metrics_field([out])) is not None:  # return_metrics
        body["metrics"] = timings
    return body
