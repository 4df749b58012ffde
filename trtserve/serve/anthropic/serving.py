"""Anthropic Messages serving logic over the shared generation path: a request becomes the chat
request it means (conversation.py) and runs through the OpenAI front end's own prompt rendering
and reply parsers (split.py), so the same conversation gets the same prompt tokens, and its reply
the same split into thinking, text and tool calls, as on /v1/chat/completions. It answers a body
or its server-sent events; the routes wrap them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request as HTTPRequest

from trtserve.engine.errors import UserError
from trtserve.serve.anthropic import split
from trtserve.serve.anthropic.blocks import BlockBuilder, new_id
from trtserve.serve.anthropic.conversation import as_chat
from trtserve.serve.anthropic.errors import error_body
from trtserve.serve.anthropic.protocol import CountTokensRequest, MessagesRequest
from trtserve.serve.anthropic.split import Prompt
from trtserve.serve.context import RequestContext
from trtserve.serve.errors import APIError
from trtserve.serve.generation import GenerationRun
from trtserve.serve.group import closing, collect_all, merged
from trtserve.serve.images import load_images
from trtserve.serve.openai.content import image_sources
from trtserve.serve.openai.serving import OpenAIServing
from trtserve.text.outputs import RequestOutput

Answer = dict | AsyncIterator[str]
PING_SECONDS = 5.0  # a stream silent this long (a long prefill) gets a `ping` event


class Turn:
    """One admitted message: its request, its run and the blocks its reply builds."""

    def __init__(self, mid: str, prompt: Prompt, run: GenerationRun, builder: BlockBuilder, model: str):
        self.id, self.prompt, self.run, self.builder, self.model = mid, prompt, run, builder, model

    def body(self, out: RequestOutput | None) -> dict:
        """The message; `out` None: as it starts (no stop reason, the prompt's tokens as input)."""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.builder.blocks if out is not None else [],
            **self.stop(out),
            "usage": self.usage(out),
        }

    def stop(self, out: RequestOutput | None) -> dict:
        """stop_reason and stop_sequence: tool_use when the reply made calls, stop_sequence when it
        ended on one of stop_sequences, max_tokens when cut, end_turn otherwise."""
        c = out.outputs[0] if out is not None else None
        if c is None or c.finish_reason is None:
            return {"stop_reason": None, "stop_sequence": None}
        if c.finish_reason == "length":
            return {"stop_reason": "max_tokens", "stop_sequence": None}
        if self.builder.has_calls:
            return {"stop_reason": "tool_use", "stop_sequence": None}
        if isinstance(c.stop_reason, str):
            return {"stop_reason": "stop_sequence", "stop_sequence": c.stop_reason}
        return {"stop_reason": "end_turn", "stop_sequence": None}

    def usage(self, out: RequestOutput | None) -> dict:
        """Anthropic's counts: input_tokens are those not read from the (prefix) cache, so input_tokens +
        cache_read_input_tokens + cache_creation_input_tokens is the whole prompt, as count_tokens says."""
        prompt = len(self.prompt.ids)
        cached = out.num_cached_tokens if out is not None else 0
        done = sum(len(c.token_ids) for c in out.outputs) if out is not None else 0
        return {
            "input_tokens": prompt - cached,
            "output_tokens": done,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        }


class MessagesServing:
    def __init__(self, chat: OpenAIServing):
        self.chat = chat

    async def count_tokens(self, req: CountTokensRequest) -> dict:
        chat_req = as_chat(req)
        images = await load_images(self.chat.svc, [s for m in chat_req.messages for s in image_sources(m)])
        prompt = await split.render(self.chat, chat_req, req.template_vars(), req.effort(), images)
        return {"input_tokens": len(prompt.ids)}

    async def create(self, req: MessagesRequest, http: HTTPRequest | None, context: RequestContext) -> Answer:
        turn = await self._start(req, context)
        if req.stream:
            return self._stream(turn)
        (out,) = await collect_all([turn.run], http)
        turn.builder.feed(out.outputs[0].text, final=True)
        return turn.body(out)

    async def _start(self, req: MessagesRequest, context: RequestContext) -> Turn:
        chat_req = as_chat(req)
        images = await load_images(self.chat.svc, [s for m in chat_req.messages for s in image_sources(m)])
        prompt = await split.render(self.chat, chat_req, req.template_vars(), req.effort(), images)
        params = chat_req.sampling_params(req.max_tokens, None, guided=prompt.tools.guided())
        plan, params = split.plan_reply(self.chat, prompt, params, req.shows_thinking())
        builder = BlockBuilder(split.Splitter(plan, context.span), req.omits_thinking(), req.parallel())
        rid = new_id("msg")
        options = req.request_options(
            client_id=rid, thinking_span=plan.thinking_span(req.thinking_budget(), params.guided), images=images
        )
        run = self.chat.svc.start(prompt.ids, params, options, timeout=req.timeout, context=context)
        return Turn(rid, prompt, run, builder, self.chat.served_name)

    # ---- stream: true ------------------------------------------------------------------------
    def _stream(self, turn: Turn) -> AsyncIterator[str]:
        return closing(self._events(turn), [turn.run])

    async def _events(self, turn: Turn) -> AsyncIterator[str]:
        yield sse({"type": "message_start", "message": turn.body(None)})
        try:
            async for item in with_pings(merged([turn.run]), PING_SECONDS):
                if item is None:
                    yield sse({"type": "ping"})
                    continue
                _, d = item
                for e in turn.builder.feed(d.text, d.finish_reason is not None):
                    yield sse(e)
        except (APIError, UserError) as err:  # after the stream began: an error event ends it
            status = err.status if isinstance(err, APIError) else 400
            yield sse(error_body(status, str(err)))
            return
        out = turn.run.output
        if out.outputs[0].finish_reason is None:  # the run ended without a finish reason: close what is open
            for e in turn.builder.feed("", True):
                yield sse(e)
        yield sse({"type": "message_delta", "delta": turn.stop(out), "usage": turn.usage(out)})
        yield sse({"type": "message_stop"})


def sse(event: dict) -> str:
    """One server-sent event, named by its type as Anthropic sends them."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def with_pings(source: AsyncIterator, every: float) -> AsyncIterator:
    """`source`'s items, and None whenever `every` seconds pass without one. `source` is iterated
    in one task of its own from start to end (a deadline it enters is bound to that task)."""
    q: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump() -> None:
        try:
            async for item in source:
                await q.put(item)
            await q.put(end)
        except Exception as err:  # noqa: BLE001 - forwarded to the consumer
            await q.put(err)
        finally:
            await source.aclose()

    task = asyncio.ensure_future(pump())
    try:
        while True:
            try:
                item = await asyncio.wait_for(q.get(), every)
            except TimeoutError:
                yield None
                continue
            if item is end:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
