"""The Responses API's request body (pydantic, unknown fields rejected) and its input items, in
OpenAI's field names (the `openai` package's types/responses/). Items the server wrote (an earlier
response's `output`) are accepted back as input, with the fields it wrote them with."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError, model_validator

from trtserve.serve.json_body import JsonBody
from trtserve.serve.openai.schema_rules import absent, present
from trtserve.serve.openai.tools import FunctionDef, NamedFunction, NamedToolChoice, Tool, ToolPlan
from trtserve.serve.request_fields import RequestOptionFields
from trtserve.serve.unicode import check_unicode

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Item(JsonBody):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class InputText(_Item):
    type: Literal["input_text"]
    text: str


class OutputText(_Item):
    """An assistant's text, as the server wrote it in an earlier response."""

    type: Literal["output_text"]
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] | None = None


class Refusal(_Item):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Item):
    """An image (docs/vision.md): a data: URL, or an http(s) URL fetched only from --allowed-media-domains."""

    type: Literal["input_image"]
    image_url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] = "auto"  # accepted; every image is one tile here


Part = Annotated[InputText | OutputText | Refusal | InputImage, Field(discriminator="type")]


class MessageItem(_Item):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[Part]
    id: str | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.refusal if isinstance(p, Refusal) else p.text for p in self.content if not _image(p))

    def chat_content(self) -> str | list[dict]:
        """Its content as chat's: the text, or text and image_url parts where it holds an image."""
        if isinstance(self.content, str) or not any(_image(p) for p in self.content):
            return self.text()
        return [
            {"type": "image_url", "image_url": {"url": p.image_url}}
            if _image(p)
            else {"type": "text", "text": p.refusal if isinstance(p, Refusal) else p.text}
            for p in self.content
        ]


def _image(part) -> bool:
    return isinstance(part, InputImage)


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str  # JSON text, as the model wrote it
    id: str | None = None
    status: ItemStatus | None = None
    # Fields of OpenAI's function calls that this server never sets: an SDK's model_dump() sends them as null.
    namespace: None = None
    caller: None = None
    async_: None = Field(None, alias="async")


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[InputText]
    id: str | None = None
    status: ItemStatus | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class ReasoningText(_Item):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(_Item):
    """A model's earlier reasoning (an earlier response's `reasoning` item), given back to the
    template with the assistant turn that follows it."""

    type: Literal["reasoning"]
    summary: list[ReasoningText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    id: str | None = None
    status: ItemStatus | None = None
    encrypted_content: None = None  # this server writes none

    def text(self) -> str:
        parts = self.content if self.content else self.summary
        return "".join(p.text for p in parts)


class ReasoningConfig(JsonBody):
    model_config = ConfigDict(extra="forbid")
    effort: Literal["minimal", "low", "medium", "high"] | None = None  # passed to templates that read it
    summary: Literal["auto", "concise", "detailed"] | None = None  # accepted; the reasoning is returned whole


def _item_type(v: Any) -> str | None:
    """An item's `type`; a message may leave it out (OpenAI's EasyInputMessage)."""
    if isinstance(v, dict):
        return v.get("type", "message")
    return getattr(v, "type", None)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(
        _item_type,
        custom_error_type="item_type",
        custom_error_message="items must be of type message, function_call, function_call_output or reasoning",
    ),
]


_ITEMS = TypeAdapter(list[InputItem])


def check_items(items: list) -> None:
    """ValueError naming the first bad item by its path (`input.2.content.0`), not by union members."""
    try:
        _ITEMS.validate_python(items)
    except ValidationError as err:
        e = max(err.errors(), key=lambda e: len(e["loc"]))  # the deepest: the union branch that matched
        path = [str(p) for p in e["loc"] if isinstance(p, int) or ("[" not in p and p not in _TAGS)]
        raise ValueError(f"input.{'.'.join(path)}: {e['msg']}") from None


_TAGS = {
    "str",
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
}  # union branches pydantic puts in a path


class FunctionTool(JsonBody):
    """A function the model may call (Responses' flat shape: no `function` wrapper)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def chat_tool(self) -> Tool:
        schema = self.parameters if self.parameters is not None else {"type": "object", "properties": {}}
        return Tool(function=FunctionDef(name=self.name, description=self.description, parameters=schema))


class FunctionChoice(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str


class TextFormatText(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class TextFormatJsonObject(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_object"]


class TextFormatJsonSchema(JsonBody):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(alias="schema", description="Must compile into a grammar (400 when it does not).")
    description: str | None = None
    strict: bool | None = None  # the output always follows the schema; accepted for compatibility


class TextConfig(JsonBody):
    model_config = ConfigDict(extra="forbid")
    format: Annotated[TextFormatText | TextFormatJsonObject | TextFormatJsonSchema, Field(discriminator="type")] = (
        TextFormatText(type="text")
    )


def _rules(schema: dict[str, Any]) -> None:
    """The rules across fields that the validators below enforce, for /openapi.json: background
    only without stream and with store; a tool_choice other than none only with tools; no
    text.format beside a tool_choice that forces a call (required, or a named function)."""
    text_only = {
        "type": "object",
        "properties": {"format": {"type": "object", "properties": {"type": {"const": "text"}}}},
    }
    schema.setdefault("allOf", []).extend(
        [
            {
                "anyOf": [
                    absent("background", {"const": False}),
                    {"allOf": [absent("stream", {"const": False}), absent("store", {"const": True})]},
                ]
            },
            {"anyOf": [absent("tool_choice", {"const": "none"}), present("tools", {"type": "array", "minItems": 1})]},
            {
                "anyOf": [
                    absent("tool_choice", {"const": "auto"}),
                    absent("tool_choice", {"const": "none"}),
                    absent("text", text_only),
                ]
            },
        ]
    )
    props = schema.get("properties", {})
    if "tool_choice" in props:
        props["tool_choice"]["description"] = "A named function must be one of `tools`."
    if "max_output_tokens" in props:
        props["max_output_tokens"]["description"] = "With the prompt, at most the model's max_seq_len."
    if "tools" in props:  # what a schema cannot check about another schema
        props["tools"]["description"] = (
            "Each function's `parameters` must compile into a grammar when tool_choice forces a call."
        )
    if "previous_response_id" in props:
        props["previous_response_id"]["description"] = "A stored, finished response (404 when there is none)."
    if "store" in props:
        props["store"]["description"] = "true (and background) only on a server with a state dir."


class ResponsesRequest(RequestOptionFields):
    """POST /v1/responses."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_rules)

    model: str | None = None
    input: Annotated[str, Field(min_length=1)] | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = None  # a system message before the input; not carried to the next turn
    previous_response_id: str | None = Field(None, min_length=1, max_length=128)
    max_output_tokens: int | None = Field(None, ge=1, lt=2**31)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    tools: list[FunctionTool] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    store: bool | None = None  # None: stored when the server has a state store
    background: bool = False
    stream: bool = False
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16
    )
    user: str | None = Field(None, max_length=256)
    truncation: Literal["disabled"] | None = None  # "auto" (dropping early turns) is not implemented
    reasoning: ReasoningConfig | None = None
    # trtserve (and vLLM) extension: template variables, e.g. {"enable_thinking": false}
    chat_template_kwargs: dict[str, Any] | None = None
    # trtserve extensions, as on /v1/chat/completions
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    top_k: int | None = Field(None, ge=-1, lt=2**31)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    timeout: float | None = Field(None, gt=0.0)  # seconds
    return_spec_decode_stats: bool = False  # true: its acceptance counts in usage.spec_decode
    guided_grammar: str | None = None  # vLLM's: an EBNF grammar over the whole reply (thinking included)
    # as on /v1/chat/completions: after this many reasoning tokens the engine closes the thinking
    thinking_token_budget: int | None = Field(None, ge=0, lt=2**31)

    @model_validator(mode="before")
    @classmethod
    def _valid_input(cls, data):
        check_unicode(data)  # a lone surrogate would reach the tokenizer
        items = data.get("input") if isinstance(data, dict) else None
        if items == "":
            raise ValueError("input must not be empty; send the text (or a list of items) to respond to")
        if isinstance(items, list):
            if not items:
                raise ValueError("input must hold at least one item")
            check_items(items)
        elif isinstance(data, dict) and "input" in data and not isinstance(items, str):
            raise ValueError("input must be a string or a list of items")
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if self.background and self.stream:
            raise ValueError("background with stream: true is not supported; poll GET /v1/responses/{id} instead")
        if self.background and self.store is False:
            raise ValueError("background: true needs store (the result is fetched with GET /v1/responses/{id})")
        plan = self.tool_plan(None)  # "needs tools", "not among the tools"
        fmt = self.text.format if self.text is not None else None
        guides = ["text.format"] if fmt is not None and fmt.type != "text" else []
        guides += ["guided_grammar"] if self.guided_grammar is not None else []
        if plan.guided() is not None and guides:
            raise ValueError(f"tool_choice {plan.mode!r} constrains the output; leave out {' and '.join(guides)}")
        return self

    def chat_tools(self) -> list[Tool] | None:
        return [t.chat_tool() for t in self.tools] if self.tools else None

    def chat_tool_choice(self):
        if isinstance(self.tool_choice, FunctionChoice):
            return NamedToolChoice(function=NamedFunction(name=self.tool_choice.name))
        return self.tool_choice

    def tool_plan(self, template: str | None) -> ToolPlan:
        return ToolPlan(self.chat_tools(), self.chat_tool_choice(), template, self.parallel_tool_calls)

    def response_format(self) -> dict | None:
        """text.format as chat's response_format (the structured-output path)."""
        fmt = self.text.format if self.text is not None else None
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "json_object"}
        spec = {"name": fmt.name, "schema": fmt.schema_, "description": fmt.description, "strict": fmt.strict}
        return {"type": "json_schema", "json_schema": spec}

    def items(self) -> list:
        """The input as items (a string is one user message)."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)
