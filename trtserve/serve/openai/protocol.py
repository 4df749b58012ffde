"""OpenAI API request bodies (pydantic, unknown fields rejected) and the response builders."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from trtserve.engine.errors import UserError
from trtserve.engine.sampling import MAX_LOGPROBS, GuidedDecoding, SamplingParams, TokenLogprob
from trtserve.serve import speculative
from trtserve.serve.json_body import JsonBody
from trtserve.serve.openai import schema_rules as rules
from trtserve.serve.openai.content import ImageURLPart
from trtserve.serve.openai.tools import Tool, ToolCall, ToolChoice, ToolPlan
from trtserve.serve.request_fields import RequestOptionFields
from trtserve.serve.telemetry.timings import metrics_field
from trtserve.serve.unicode import check_unicode
from trtserve.text.outputs import CompletionOutput, RequestOutput


# Bounds every integer the engine turns into a tensor index or size (a larger one was a 500, found by
# tests/fuzz); whether an id lies in the vocabulary is checked against the model (engine/rules.py).
def _json_int(v: Any) -> Any:
    """A JSON integer (3 or 3.0), not true or "3", which pydantic's lax mode would take as 1 and 3."""
    if isinstance(v, bool | str):
        raise ValueError("must be an integer")
    return v


TokenId = Annotated[int, Field(ge=0, lt=2**31), BeforeValidator(_json_int)]
_TOKEN_ID = {"type": "integer", "minimum": 0, "exclusiveMaximum": 2**31}
# What _non_empty below accepts: a string, or a non-empty list of non-empty strings or token-id lists.
_PROMPT = WithJsonSchema(
    {
        "anyOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            {"type": "array", "minItems": 1, "items": _TOKEN_ID},
            {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": _TOKEN_ID}},
        ],
        "description": f"Text, texts, or lists of {rules.TOKEN_IDS}.",
    }
)


def min_over_max(min_tokens: int, max_tokens: int) -> str:
    return f"min_tokens ({min_tokens}) exceeds max_tokens ({max_tokens}); lower min_tokens or raise max_tokens"


def _is_token_id(key: str) -> bool:
    """A logit_bias key: ASCII digits ("²" is a digit to str.isdigit, not to int) of an int32."""
    k = key.strip()
    return k.isascii() and k.isdigit() and len(k) <= 10 and int(k) < 2**31


class StreamOptions(JsonBody):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(JsonBody):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field("response", max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None  # the output always follows the schema; accepted for compatibility


class ResponseFormat(JsonBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra=rules.response_format_rules)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema(self):
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError('response_format needs json_schema exactly when type is "json_schema"')
        return self


class LoRARequest(JsonBody):
    """TensorRT-LLM's `lora_request` field: the LoRA adapter to run under, by its served name. The
    adapter must be served already (POST /v1/load_lora_adapter); lora_int_id and lora_path are
    accepted for TensorRT-LLM's clients and not used (a request never loads an adapter)."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None
    lora_path: str | None = None


class SamplingFields(RequestOptionFields):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=rules.sampling_rules)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, lt=2**31)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, lt=2**31)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    n: int = Field(1, ge=1, le=16)
    best_of: int | None = Field(None, ge=1)
    stop: Annotated[str | list[str] | None, WithJsonSchema(rules.STOP)] = None
    stop_token_ids: list[TokenId] | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    logit_bias: dict[str, float] | None = Field(  # token id (as text, as OpenAI sends it) -> [-100, 100]
        None,
        json_schema_extra={
            "propertyNames": {"pattern": rules.TOKEN_ID_KEY},
            "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
        },
    )
    response_format: ResponseFormat | None = None
    guided_json: dict[str, Any] | str | None = None  # vLLM's extra fields: a JSON schema,
    guided_regex: str | None = None  # a regex,
    guided_choice: list[str] | None = Field(None, min_length=1)  # one of these strings,
    guided_grammar: str | None = None  # or an EBNF grammar (xgrammar dialect, root rule `root`)
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, lt=2**31)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    user: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    timeout: float | None = Field(None, gt=0.0)  # seconds; trtserve extension
    lora_request: LoRARequest | None = None  # TensorRT-LLM's adapter selection; `model: NAME` does the same
    # trtserve extension: true adds the request's acceptance counts to `usage.spec_decode` (and to the
    # last streamed chunk)
    return_spec_decode_stats: bool = False

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else v
        if stops is not None and (len(stops) > 16 or any(not s for s in stops)):
            raise ValueError("give at most 16 non-empty stop strings")
        return v

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data):
        check_unicode(data)  # a lone surrogate reached the tokenizer: a 500 (tests/fuzz)
        return data

    @model_validator(mode="after")
    def _unsupported(self):
        if self.logit_bias and any(not _is_token_id(k) for k in self.logit_bias):
            raise ValueError("logit_bias keys must be token ids (non-negative integers)")
        if self.logit_bias and any(not abs(v) <= 100 for v in self.logit_bias.values()):  # NaN too
            raise ValueError("logit_bias values must lie in [-100, 100]")
        guides = [self.guided_json, self.guided_regex, self.guided_choice, self.guided_grammar]
        guides.append(None if self.response_format is None or self.response_format.type == "text" else 1)
        if sum(g is not None for g in guides) > 1:
            raise ValueError(
                "give at most one of response_format, guided_json, guided_regex, guided_choice, guided_grammar"
            )
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported; leave it out")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        if self.asked_max_tokens() is not None and self.min_tokens > self.asked_max_tokens():
            raise ValueError(min_over_max(self.min_tokens, self.asked_max_tokens()))
        return self

    def asked_max_tokens(self) -> int | None:
        """The output budget the client set (None: the rest of the context)."""
        return self.max_tokens

    def sampling_params(
        self,
        max_tokens: int,
        logprobs: int | None,
        prompt_logprobs: int | None = None,
        guided: GuidedDecoding | None = None,
    ) -> SamplingParams:
        """The engine's params, built without validating again: this body was validated when it was
        parsed, within bounds SamplingParams accepts (tests/unit/test_sampling_bounds.py checks that).
        max_tokens: at least 1; logprobs, prompt_logprobs: at most MAX_LOGPROBS; guided: the grammar of
        a tool call that must be made (validation refused it together with a guided_* field)."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if self.min_tokens > max_tokens:  # max_tokens unset: the rest of the context is less
            raise UserError(min_over_max(self.min_tokens, max_tokens) + " (max_tokens: the rest of the context)")
        return SamplingParams.model_construct(
            n=self.n,
            max_tokens=max_tokens,
            min_tokens=self.min_tokens,
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
            guided=guided or self.guided_decoding(),
            logit_bias={int(k): v for k, v in (self.logit_bias or {}).items()},
        )

    def guided_decoding(self) -> GuidedDecoding | None:
        """The grammar the output must follow, from response_format or a guided_* field."""
        import json

        rf = self.response_format
        if rf is not None and rf.type == "json_schema":
            return GuidedDecoding(kind="json_schema", spec=json.dumps(rf.json_schema.schema_))
        if rf is not None and rf.type == "json_object":
            return GuidedDecoding(kind="json_object")
        if self.guided_json is not None:
            spec = self.guided_json if isinstance(self.guided_json, str) else json.dumps(self.guided_json)
            return GuidedDecoding(kind="json_schema", spec=spec)
        if self.guided_regex is not None:
            return GuidedDecoding(kind="regex", spec=self.guided_regex)
        if self.guided_choice is not None:
            return GuidedDecoding(kind="choice", spec=json.dumps(self.guided_choice))
        if self.guided_grammar is not None:
            return GuidedDecoding(kind="grammar", spec=self.guided_grammar)
        return None


class CompletionRequest(SamplingFields):
    prompt: Annotated[str | list[str] | list[TokenId] | list[list[TokenId]], _PROMPT]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    suffix: None = None

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v):
        if v == "" or (isinstance(v, list) and (not v or any(isinstance(p, list | str) and len(p) == 0 for p in v))):
            raise ValueError("prompt must not be empty")
        return v


class TextPart(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(JsonBody):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Annotated[TextPart | ImageURLPart, Field(discriminator="type")]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # role "tool": the call this message answers
    # an assistant's earlier reasoning (vLLM and OpenRouter send `reasoning`, DeepSeek `reasoning_content`)
    reasoning: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content if isinstance(p, TextPart))
        return self.content or ""


class ChatCompletionRequest(SamplingFields):
    model_config = ConfigDict(extra="forbid", json_schema_extra=rules.chat_rules)

    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    max_completion_tokens: int | None = Field(None, ge=1, lt=2**31)
    add_generation_prompt: bool = True
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None  # default: "auto" with tools, else "none"
    parallel_tool_calls: bool = True
    # template variables (e.g. {"enable_thinking": false}) over the server's --default-chat-template-kwargs
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None  # for templates that read it
    include_reasoning: bool = True  # false: the reasoning is split off and not returned
    # vLLM's: after this many reasoning tokens the engine closes the thinking and the answer follows
    thinking_token_budget: int | None = Field(None, ge=0, lt=2**31)

    def asked_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @model_validator(mode="after")
    def _logprobs(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        return self

    @model_validator(mode="after")
    def _tools(self):
        plan = self.tool_plan(None)
        if plan.guided() is not None and self.guided_decoding() is not None:
            raise ValueError(f"tool_choice {plan.mode!r} constrains the output; leave out response_format and guided_*")
        return self

    def tool_plan(self, template: str | None, parser: str | None = None) -> ToolPlan:
        """How the tools are used, for a chat template (its text picks the tool-call parser unless
        the server names one)."""
        return ToolPlan(self.tools, self.tool_choice, template, self.parallel_tool_calls, parser)


class TokenizeRequest(JsonBody):
    # exactly one of prompt or messages (both are non-null when given)
    model_config = ConfigDict(extra="forbid", json_schema_extra=rules.tokenize_rules)
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    add_special_tokens: bool = True
    add_generation_prompt: bool = True

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data):
        check_unicode(data)
        if isinstance(data, dict) and any(k in data and data[k] is None for k in ("prompt", "messages")):
            raise ValueError("give exactly one of prompt or messages, with a value (not null)")
        return data

    @model_validator(mode="after")
    def _one(self):
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        return self


class DetokenizeRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[TokenId] = Field(description=rules.TOKEN_IDS.capitalize() + ".")


# ---- responses -----------------------------------------------------------------------------


def usage(outputs: list[RequestOutput], spec_decode: bool = False) -> dict:
    """OpenAI's usage object; `spec_decode`: with the sequences' speculative-decoding counts."""
    prompt = sum(len(o.prompt_token_ids) for o in outputs)
    completion = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    cached = sum(o.num_cached_tokens for o in outputs)
    body = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if spec_decode:
        body["spec_decode"] = speculative.stats_field(c.spec for o in outputs for c in o.outputs)
    if (timings := metrics_field(outputs)) is not None:  # return_metrics
        body["metrics"] = timings
    return body


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
