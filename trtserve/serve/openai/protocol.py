"""OpenAI API request bodies (pydantic, unknown fields rejected) and the response builders."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trtserve.engine.sampling import MAX_LOGPROBS, SamplingParams, TokenLogprob
from trtserve.text.outputs import CompletionOutput, RequestOutput


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingFields(BaseModel):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    n: int = Field(1, ge=1, le=16)
    best_of: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    user: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    timeout: float | None = Field(None, gt=0.0)  # seconds; trtserve extension
    priority: float = 0.0  # higher is served first; trtserve extension
    cache_salt: str | None = None  # isolates prefix-cache entries; trtserve extension

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else v
        if stops is not None and (len(stops) > 16 or any(not s for s in stops)):
            raise ValueError("give at most 16 non-empty stop strings")
        return v

    @model_validator(mode="after")
    def _unsupported(self):
        if self.logit_bias:
            raise ValueError("logit_bias is not supported by trtserve; leave it out")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported; leave it out")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        return self

    def sampling_params(
        self, max_tokens: int, logprobs: int | None, prompt_logprobs: int | None = None
    ) -> SamplingParams:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            n=self.n,
            max_tokens=max_tokens,
            min_tokens=min(self.min_tokens, max_tokens),
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=0 if self.top_k in (None, -1) else self.top_k,
            min_p=self.min_p or 0.0,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=self.repetition_penalty or 1.0,
            seed=self.seed,
            stop=stops,
            stop_token_ids=list(self.stop_token_ids or []),
            include_stop_str_in_output=self.include_stop_str_in_output,
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=self.skip_special_tokens,
        )


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    suffix: None = None

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v):
        if isinstance(v, list) and (not v or any(isinstance(p, list | str) and len(p) == 0 for p in v)):
            raise ValueError("prompt must not be empty")
        return v


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    max_completion_tokens: int | None = Field(None, ge=1)
    add_generation_prompt: bool = True
    response_format: ResponseFormat | None = None

    @model_validator(mode="after")
    def _logprobs(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        return self


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True

    @model_validator(mode="after")
    def _one(self):
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        return self


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int]


# ---- responses -----------------------------------------------------------------------------


def usage(outputs: list[RequestOutput]) -> dict:
    prompt = sum(len(o.prompt_token_ids) for o in outputs)
    completion = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    cached = sum(o.num_cached_tokens for o in outputs)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def completion_logprobs(tokenizer, lps: list[TokenLogprob | None], offset: int = 0) -> dict:
    tokens, values, tops, offsets = [], [], [], []
    pos = offset
    for lp in lps:
        if lp is None:  # the first prompt token has no logprob
            continue
        t = token_text(tokenizer, lp.token_id)
        tokens.append(t)
        values.append(lp.logprob)
        tops.append({token_text(tokenizer, i): v for i, v in lp.top} or None)
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(tokenizer, lps: list[TokenLogprob]) -> dict:
    def entry(i: int, v: float) -> dict:
        t = token_text(tokenizer, i)
        return {"token": t, "logprob": v, "bytes": list(t.encode())}

    return {
        "content": [entry(lp.token_id, lp.logprob) | {"top_logprobs": [entry(i, v) for i, v in lp.top]} for lp in lps]
    }


def completion_choice(index: int, text: str, c: CompletionOutput, logprobs: Any) -> dict:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": c.finish_reason,
        "stop_reason": c.stop_reason,
    }


def envelope(kind: str, request_id: str, model: str, choices: list[dict], usage_: dict | None = None) -> dict:
    body = {"id": request_id, "object": kind, "created": int(time.time()), "model": model, "choices": choices}
    if usage_ is not None:
        body["usage"] = usage_
    return body
