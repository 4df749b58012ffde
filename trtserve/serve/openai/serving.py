"""OpenAI-compatible serving logic: prompts in, choices out, over the shared GenerationService.

It answers with the response body (a dict) or, for `stream: true`, its server-sent events; the
routes (routes.py) and Batch API lines (serve/batch/execute.py) wrap them. The repository has
routed the request to this version already, so the model it names is not looked at again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request as HTTPRequest

from trtserve.engine.errors import UserError
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.thinking import ThinkingSpan
from trtserve.engine.vision import ImageInput
from trtserve.serve import speculative
from trtserve.serve.context import RequestContext
from trtserve.serve.errors import APIError, error_body
from trtserve.serve.generation import GenerationRun, GenerationService
from trtserve.serve.group import admit_all, collect_all, merged
from trtserve.serve.images import load_images, prompt_with_images, vision_of
from trtserve.serve.openai import protocol as p
from trtserve.serve.openai import tools
from trtserve.serve.openai.content import image_sources
from trtserve.serve.openai.reply import ReplyPlan, reply_plan, template_kwargs
from trtserve.serve.receipts.model import receipt_field
from trtserve.serve.repository import adapters as lora
from trtserve.serve.repository.repository import Repository
from trtserve.serve.sse import DONE, event

Answer = dict | AsyncIterator[str]  # a response body, or server-sent events (stream: true)


class OpenAIServing:
    def __init__(self, service: GenerationService):
        self.svc = service
        self.tok = service.tokenizer

    # ---- helpers -------------------------------------------------------------------------
    @property
    def served_name(self) -> str:
        """`name:VERSION`: the `model` of every response says which version answered (a LoRA
        adapter's name alone: the name it was asked by, as vLLM answers)."""
        if self.svc.adapter is not None:
            return self.svc.adapter.name
        return f"{self.svc.model_name}:{self.svc.version}"

    def max_tokens(self, asked: int | None, prompt_len: int) -> int:
        room = self.svc.max_seq_len - prompt_len
        if asked is not None:
            return asked  # the engine names both numbers if it does not fit
        if room < 1:
            raise APIError(
                400,
                f"the prompt has {prompt_len} tokens, which leaves no room in the engine's max_seq_len of {self.svc.max_seq_len}",
            )
        return room

    async def encode_chat(
        self,
        messages: list[p.ChatMessage],
        add_generation_prompt: bool,
        tool_defs: list[dict] | None = None,
        kwargs: dict | None = None,
        *,
        images: tuple[ImageInput, ...],
    ) -> list[int]:
        """kwargs: the template's extra variables (reply.template_kwargs); images: the messages' images, loaded
        (load_images). A vision model's prompt is built as its HF processor builds it: each message's content
        as parts, each image placeholder expanded in the rendered text, special tokens added unless the
        template wrote the BOS token; a prompt with images is expanded and tokenized off the event loop."""
        convo = [tools.template_message(m) for m in messages]
        vision = vision_of(self.svc) is not None
        if vision:  # processors' templates iterate a message's parts (a string's would be its characters)
            convo = [
                m | {"content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str) else m
                for m in convo
            ]
        try:
            text = self.tok.apply_chat_template(
                convo, tools=tool_defs, add_generation_prompt=add_generation_prompt, tokenize=False, **(kwargs or {})
            )
        except Exception as err:  # jinja raises for conversations the template rejects
            raise APIError(400, f"the chat template rejected these messages: {err}", "messages") from None
        bos = self.tok.bos_token
        special = vision and not (bos and text.startswith(bos))
        if not images:
            return prompt_with_images(self.svc, text, images, special)
        return await asyncio.to_thread(prompt_with_images, self.svc, text, images, special)

    def _start(
        self,
        client_id: str,
        ids: list[int],
        params: SamplingParams,
        body: p.SamplingFields,
        context: RequestContext,
        thinking: ThinkingSpan | None = None,
        images: tuple[ImageInput, ...] = (),
    ) -> GenerationRun:
        """thinking: the reply's think tags and budget (ReplyPlan.thinking_span)."""
        options = body.request_options(client_id=client_id, thinking_span=thinking, images=images)
        return self.svc.start(ids, params, options, timeout=body.timeout, context=context)

    @staticmethod
    async def stream(events: AsyncIterator[str]) -> AsyncIterator[str]:
        """The events, then [DONE]; an error after the stream began is an error event."""
        try:
            async for chunk in events:
                yield chunk
        except (APIError, UserError) as err:
            status = err.status if isinstance(err, APIError) else 400
            yield event(error_body("/v1", status, str(err)))
        yield DONE

    # ---- /v1/completions ---------------------------------------------------------------------
    async def completions(self, body: p.CompletionRequest, http: HTTPRequest | None, context: RequestContext) -> Answer:
        """http: the client, whose disconnect aborts the request (None: nobody to watch, a batch line)."""
        texts, prompts = self._prompts(body.prompt)
        echo_lp = body.logprobs if body.echo and body.logprobs is not None else None

        def start(i: int) -> GenerationRun:
            params = body.sampling_params(self.max_tokens(body.max_tokens, len(prompts[i])), body.logprobs, echo_lp)
            return self._start(f"{rid}-{i}", prompts[i], params, body, context)

        rid = self.svc.new_id("cmpl")
        runs = admit_all(len(prompts), start)  # every prompt or none
        name = self.served_name
        if body.stream:
            return self.stream(self._stream_completions(rid, name, body, runs, texts))
        outputs = await collect_all(runs, http)
        choices = []
        for i, out in enumerate(outputs):
            for c in out.outputs:
                text = (texts[i] if body.echo else "") + c.text
                lps = None
                if body.logprobs is not None:
                    lps = p.completion_logprobs(self.tok, (out.prompt_logprobs or []) if body.echo else [])
                    gen = p.completion_logprobs(self.tok, c.logprobs or [], offset=len(texts[i]) if body.echo else 0)
                    lps = {k: lps[k] + gen[k] for k in gen}
                choices.append(p.completion_choice(i * body.n + c.index, text, c, lps))
        envelope = p.envelope("text_completion", rid, name, choices, p.usage(outputs, body.return_spec_decode_stats))
        return envelope | {"receipt": receipt_field(runs)}

    def _prompts(self, prompt) -> tuple[list[str], list[list[int]]]:
        if isinstance(prompt, str):
            prompt = [prompt]
        if prompt and isinstance(prompt[0], int):
            prompt = [prompt]
        texts, ids = [], []
        for item in prompt:
            if isinstance(item, str):
                texts.append(item)
                ids.append(list(self.tok.encode(item)))
            else:
                ids.append([int(t) for t in item])
                texts.append(self.tok.decode(item, skip_special_tokens=False))
        return texts, ids

    async def _stream_completions(self, rid, name, body: p.CompletionRequest, runs, texts):
        if body.echo:
            for i in range(len(runs)):
                for j in range(body.n):
                    yield event(
                        p.envelope(
                            "text_completion",
                            rid,
                            name,
                            [{"index": i * body.n + j, "text": texts[i], "logprobs": None, "finish_reason": None}],
                        )
                    )
        offsets: dict[int, int] = {}
        async for i, d in merged(runs):
            index = i * body.n + d.index
            lps = None
            if body.logprobs is not None and d.logprobs:
                lps = p.completion_logprobs(self.tok, d.logprobs, offsets.get(index, 0))
                offsets[index] = offsets.get(index, 0) + sum(len(t) for t in lps["tokens"])
            choice = {"index": index, "text": d.text, "logprobs": lps, "finish_reason": d.finish_reason}
            if d.finish_reason:
                choice["stop_reason"] = d.stop_reason
            chunk = p.envelope("text_completion", rid, name, [choice])
            yield event(chunk | _spec_decode(body, runs[i], d))
        if body.stream_options and body.stream_options.include_usage:
            usage = p.usage([r.output for r in runs], body.return_spec_decode_stats)
            yield event(p.envelope("text_completion", rid, name, [], usage))

    # ---- /v1/chat/completions ----------------------------------------------------------------
    async def chat(self, body: p.ChatCompletionRequest, http: HTTPRequest | None, context: RequestContext) -> Answer:
        """http: as for completions."""
        cfg = self.svc.config
        plan = body.tool_plan(getattr(self.tok, "chat_template", None), cfg.tool_call_parser)
        kwargs = template_kwargs(cfg.default_chat_template_kwargs, body.chat_template_kwargs, body.reasoning_effort)
        images = await load_images(self.svc, [s for m in body.messages for s in image_sources(m)])  # off the loop
        ids = await self.encode_chat(
            body.messages, body.add_generation_prompt, plan.template_tools(), kwargs, images=images
        )
        top = body.top_logprobs or 0 if body.logprobs else None
        max_tokens = self.max_tokens(body.max_completion_tokens or body.max_tokens, len(ids))
        rid = self.svc.new_id("chatcmpl")
        params = body.sampling_params(max_tokens, top, guided=plan.guided())
        thinks = self.svc.engine.info.capabilities.thinking
        reply = reply_plan(self.tok, cfg, plan, ids, constrained(params), body.include_reasoning, thinks)
        params = reply.params(params)
        span = reply.thinking_span(body.thinking_token_budget, params.guided)
        runs = [
            self._start(f"{rid}-0", ids, params, body, context, span, images)
        ]  # one prompt: its n sequences share one run
        name = self.served_name
        if body.stream:
            return self.stream(self._stream_chat(rid, name, body, runs, reply, params.skip_special_tokens, context))
        (out,) = await collect_all(runs, http)
        choices = []
        for c in out.outputs:
            split = reply.stream(context.span)
            message = split.message(c.text)
            choices.append(
                {
                    "index": c.index,
                    "message": message,
                    "logprobs": p.chat_logprobs(self.tok, c.logprobs or []) if body.logprobs else None,
                    "finish_reason": tools.finish_reason(c.finish_reason, split.has_calls),
                    "stop_reason": c.stop_reason,
                }
            )
        usage = p.usage([out], body.return_spec_decode_stats) | reply.usage_details(
            self.tok, [out], params.skip_special_tokens
        )
        return p.envelope("chat.completion", rid, name, choices, usage) | {"receipt": receipt_field(runs)}

    async def _stream_chat(
        self, rid, name, body: p.ChatCompletionRequest, runs, reply: ReplyPlan, skip: bool, context: RequestContext
    ):
        """skip: the run's skip_special_tokens (its text, which the reasoning count decodes again)."""
        kind = "chat.completion.chunk"
        for j in range(body.n):
            yield event(
                p.envelope(
                    kind,
                    rid,
                    name,
                    [
                        {
                            "index": j,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                )
            )
        splits = {j: reply.stream(context.span) for j in range(body.n)}
        async for i, d in merged(runs):
            split = splits[d.index]
            delta = split.delta(d.text, final=d.finish_reason is not None)
            finish = tools.finish_reason(d.finish_reason, split.has_calls)
            lps = p.chat_logprobs(self.tok, d.logprobs) if body.logprobs and d.logprobs else None
            yield event(
                p.envelope(
                    kind,
                    rid,
                    name,
                    [{"index": d.index, "delta": delta, "logprobs": lps, "finish_reason": finish}],
                )
                | _spec_decode(body, runs[i], d)
            )
        if body.stream_options and body.stream_options.include_usage:
            outputs = [r.output for r in runs]
            usage = p.usage(outputs, body.return_spec_decode_stats) | reply.usage_details(self.tok, outputs, skip)
            yield event(p.envelope(kind, rid, name, [], usage))

    # ---- models and tokens -------------------------------------------------------------------
    def model_card(self, model_id: str | None = None) -> dict:
        card = {
            "id": model_id or self.svc.model_name,
            "object": "model",
            "created": int(self.svc.started),
            "owned_by": "trtserve",
            "max_model_len": self.svc.max_seq_len,
        }
        if self.svc.adapter is not None:  # vLLM's LoRA card: the base model, and what the adapter is
            card |= {"parent": self.svc.base_model, "root": self.svc.adapter.content_hash}
        return card

    async def tokenize(self, body: p.TokenizeRequest) -> dict:
        if body.messages is not None:
            images = await load_images(self.svc, [s for m in body.messages for s in image_sources(m)])
            ids = await self.encode_chat(body.messages, body.add_generation_prompt, images=images)
        else:
            ids = list(self.tok.encode(body.prompt, add_special_tokens=body.add_special_tokens))
        return {"tokens": ids, "count": len(ids), "max_model_len": self.svc.max_seq_len}

    def detokenize(self, body: p.DetokenizeRequest) -> dict:
        vocab = len(self.tok)
        if any(t < 0 or t >= vocab for t in body.tokens):
            raise APIError(400, f"token ids must lie in [0, {vocab})", "tokens")
        return {"prompt": self.tok.decode(body.tokens)}


def model_list(repo: Repository) -> dict:
    """/v1/models: every model, then (in a repository) each of its versions (`name:V`) and labels (`name@L`)."""
    data = []
    for name, m in repo.models.items():
        default = m.default_version()
        card = {"object": "model", "owned_by": "trtserve"}
        if default is not None and default.service is not None:
            card = OpenAIServing(default.service).model_card()
        data.append({**card, "id": name, "versions": [str(v) for v in sorted(m.versions)], "labels": m.policy.labels})
        if repo.single:
            continue  # an engine dir: one model, one version, listed as before
        for _, mv in sorted(m.versions.items()):
            data.append({"id": mv.name, "object": "model", "owned_by": "trtserve", "state": mv.state.value})
        for label, v in sorted(m.policy.labels.items()):
            data.append({"id": f"{name}@{label}", "object": "model", "owned_by": "trtserve", "version": str(v)})
    listed = set()
    for mv, ref in lora.served(repo.models):  # each LoRA adapter once, as its first base version serves it
        if ref.name not in listed and mv.service is not None:
            listed.add(ref.name)
            data.append(OpenAIServing(mv.service.under(ref)).model_card())
    return {"object": "list", "data": data}


def _spec_decode(body: p.SamplingFields, run: GenerationRun, d) -> dict:
    """The `spec_decode` field of a sequence's last streamed chunk, when the client asked for it."""
    if not (body.return_spec_decode_stats and d.finish_reason):
        return {}
    return {"spec_decode": speculative.stats_field([run.output.outputs[d.index].spec])}


def constrained(params: SamplingParams) -> bool:
    """A grammar shapes the answer from the first token (a tool choice, response_format, guided_json,
    regex or choice); a `guided_grammar` is the whole reply, thinking included, and is read as one."""
    return params.guided is not None and params.guided.kind != "grammar"
