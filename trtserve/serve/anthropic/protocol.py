"""Anthropic Messages request bodies (pydantic), in Anthropic's field names (the `anthropic` SDK's
types/message_create_params.py and message_count_tokens_params.py).

Top-level fields this server does not know are accepted and ignored (the SDK and Claude Code add
fields with every release: `service_tier`, `container`, `context_management`, ...); a content block
of a type it cannot take, a tool it cannot run or a conversation it cannot render is a 400 naming
the field. Per-block extras (`cache_control`, `citations`) are accepted and ignored."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from trtserve.serve.json_body import JsonBody
from trtserve.serve.openai.schema_rules import absent, present
from trtserve.serve.request_fields import RequestOptionFields
from trtserve.serve.unicode import check_unicode


class _Part(JsonBody):
    model_config = ConfigDict(extra="ignore")  # cache_control, citations, caller, ...: accepted, not used


class TextBlock(_Part):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Part):
    """An assistant's earlier call (the `tool_use` block of an earlier reply)."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(_Part):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[TextBlock] = ""
    is_error: bool = False

    def text(self) -> str:
        body = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return f"Error: {body}" if self.is_error else body  # templates have no field for is_error


class ThinkingBlock(_Part):
    """An assistant's earlier thinking; its signature is taken back as sent, not checked."""

    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Part):
    type: Literal["redacted_thinking"]
    data: str  # opaque; this server writes none, and drops it from the prompt


class ImageSourceBlock(_Part):
    type: Literal["base64", "url"]
    media_type: str | None = None  # base64: image/png | image/jpeg | image/webp
    data: str | None = None  # base64: the file's bytes
    url: str | None = None  # url: fetched only from --allowed-media-domains (docs/vision.md)


class ImageBlock(_Part):
    type: Literal["image"]
    source: ImageSourceBlock

    def url(self) -> str:
        """The image as chat's image_url takes it: a data: URL, or the URL."""
        s = self.source
        return f"data:{s.media_type or 'image/png'};base64,{s.data or ''}" if s.type == "base64" else s.url or ""


UserBlock = Annotated[TextBlock | ToolResultBlock | ImageBlock, Field(discriminator="type")]
AssistantBlock = Annotated[
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock, Field(discriminator="type")
]
# The block types each role takes (as the models below say); anything else is refused, by name,
# before the blocks are parsed.
ROLE_BLOCKS = {
    "user": ("text", "tool_result", "image"),
    "assistant": ("text", "thinking", "redacted_thinking", "tool_use"),
    "system": ("text",),
}
_LATER = {"document", "search_result"}  # Anthropic's, refused until trtserve reads them


class _Turn(_Part):
    content: Any

    def blocks(self) -> list:
        return [TextBlock(type="text", text=self.content)] if isinstance(self.content, str) else list(self.content)


class UserMessage(_Turn):
    role: Literal["user"]
    content: str | list[UserBlock]


class AssistantMessage(_Turn):
    role: Literal["assistant"]
    content: str | list[AssistantBlock]


class SystemMessage(_Turn):
    role: Literal["system"]
    content: str | list[TextBlock]


Message = Annotated[UserMessage | AssistantMessage | SystemMessage, Field(discriminator="role")]


class ToolDef(_Part):
    """A client tool (`type` "custom" or left out); its `input_schema` is the call's JSON schema."""

    type: Literal["custom"] | None = None
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    input_schema: dict[str, Any]


class ToolChoiceAuto(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["tool"]
    name: str = Field(min_length=1)
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["none"]


ToolChoice = Annotated[ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")]


MIN_THINKING_BUDGET = 1024  # Anthropic's floor for thinking.budget_tokens (its SDK types say so too)


class ThinkingEnabled(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["enabled"]
    # the engine's thinking budget: at least 1024 and below max_tokens, as Anthropic's API requires
    budget_tokens: int = Field(lt=2**31, json_schema_extra={"minimum": MIN_THINKING_BUDGET})
    display: Literal["summarized", "omitted"] | None = None

    @field_validator("budget_tokens")
    @classmethod
    def _floor(cls, v: int) -> int:
        if v < MIN_THINKING_BUDGET:
            raise ValueError(f"must be at least {MIN_THINKING_BUDGET}, as Anthropic's API requires (got {v})")
        return v


class ThinkingAdaptive(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["adaptive"]
    display: Literal["summarized", "omitted"] | None = None


class ThinkingDisabled(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["disabled"]


Thinking = Annotated[ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled, Field(discriminator="type")]


class JsonOutputFormat(JsonBody):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema", description="Must compile into a grammar (400 when it does not).")


class OutputConfig(JsonBody):
    model_config = ConfigDict(extra="ignore")
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None  # -> the template's reasoning_effort
    format: JsonOutputFormat | None = None  # the text block follows this schema


class Metadata(JsonBody):
    model_config = ConfigDict(extra="ignore")
    user_id: str | None = Field(None, max_length=256)  # also the sticky-routing key, as OpenAI's `user`


def _rules(schema: dict[str, Any]) -> None:
    """The rules across fields the validators enforce, for /openapi.json: a tool_choice other than
    none only with tools; no output_config.format (or guided_grammar) beside a tool_choice that forces
    a call; not both output_config.format and guided_grammar. What a schema cannot say, the
    descriptions do."""
    props = schema.get("properties", {})
    none = {"properties": {"type": {"const": "none"}}}
    rules = [{"anyOf": [absent("tool_choice", none), present("tools", {"type": "array", "minItems": 1})]}]
    unformatted = absent("output_config", {"properties": {"format": {"type": "null"}}})
    rules.append({"anyOf": [unformatted, _free_choice()]})
    if "guided_grammar" in props:
        rules += [
            {"anyOf": [absent("guided_grammar"), _free_choice()]},
            {"anyOf": [absent("guided_grammar"), unformatted]},
        ]
    schema.setdefault("allOf", []).extend(rules)
    words = {
        "messages": "Each tool_result answers a tool_use of an earlier assistant turn; the last turn is not the assistant's.",
        "tool_choice": "A named tool must be one of `tools`.",
        "tools": "Each input_schema must compile into a grammar when tool_choice forces a call.",
        "output_config": "format.schema must compile into a grammar (400 when it does not).",
        "thinking": "budget_tokens below max_tokens.",
    }
    for name, text in words.items():
        if name in props:
            props[name]["description"] = text


def _free_choice() -> dict:
    """tool_choice absent, or one that forces no call (auto, none)."""
    return absent("tool_choice", {"properties": {"type": {"enum": ["auto", "none"]}}})


class CountTokensRequest(RequestOptionFields):
    """POST /v1/messages/count_tokens: everything that makes the prompt."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_rules)

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolDef] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    # trtserve (and vLLM) extension: template variables over what `thinking` sets, e.g. {"enable_thinking": false}
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_blocks(cls, data):
        check_unicode(data)  # a lone surrogate would reach the tokenizer
        if isinstance(data, dict):
            check_blocks(data.get("messages"))
            check_tools(data.get("tools"))
        return data

    @model_validator(mode="after")
    def _conversation(self):
        check_conversation(self.messages)
        names = [t.name for t in self.tools or []]
        choice = self.tool_choice
        if choice is not None and choice.type != "none" and not names:
            raise ValueError(f"tool_choice {choice.type!r} needs tools; send tools or leave tool_choice out")
        if isinstance(choice, ToolChoiceTool) and choice.name not in names:
            raise ValueError(f"tool_choice.name: {choice.name!r} is not among the tools ({', '.join(names)})")
        if self.output_config and self.output_config.format and isinstance(choice, ToolChoiceAny | ToolChoiceTool):
            raise ValueError(f"tool_choice {choice.type!r} constrains the output; leave out output_config.format")
        return self

    def system_text(self) -> str | None:
        if self.system is None or isinstance(self.system, str):
            return self.system
        return "\n\n".join(b.text for b in self.system)

    def template_vars(self) -> dict[str, Any]:
        """`thinking` as the variable Qwen3-style templates read, then the request's own on top."""
        think = {"enabled": {"enable_thinking": True}, "disabled": {"enable_thinking": False}}
        return think.get(self.thinking.type if self.thinking else "", {}) | (self.chat_template_kwargs or {})

    def effort(self) -> str | None:
        """output_config.effort as the reasoning_effort templates take (low / medium / high)."""
        effort = self.output_config.effort if self.output_config else None
        return "high" if effort in ("xhigh", "max") else effort

    def thinking_budget(self) -> int | None:
        """The engine's thinking budget: `budget_tokens` when enabled, 0 when disabled (a model that
        thinks anyway is closed at once), none when adaptive or unset."""
        if isinstance(self.thinking, ThinkingEnabled):
            return self.thinking.budget_tokens
        return 0 if isinstance(self.thinking, ThinkingDisabled) else None

    def shows_thinking(self) -> bool:
        """false: the model's thinking is split off and dropped (`thinking: {"type": "disabled"}`)."""
        return self.thinking is None or self.thinking.type != "disabled"

    def omits_thinking(self) -> bool:
        """`display: "omitted"`: thinking blocks carry a signature and no text."""
        return getattr(self.thinking, "display", None) == "omitted"

    def parallel(self) -> bool:
        return not getattr(self.tool_choice, "disable_parallel_tool_use", False)


class MessagesRequest(CountTokensRequest):
    """POST /v1/messages."""

    max_tokens: int = Field(ge=1, lt=2**31)
    stream: bool = False
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = Field(None, max_length=16)
    temperature: float | None = Field(None, ge=0.0, le=1.0)  # today's SDK no longer sends these three
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, lt=2**31)
    metadata: Metadata | None = None
    # trtserve extensions, as on /v1/chat/completions
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    timeout: float | None = Field(None, gt=0.0)  # seconds
    guided_grammar: str | None = None  # vLLM's: an EBNF grammar over the whole reply (thinking included)

    @model_validator(mode="after")
    def _budget(self):
        t = self.thinking
        if isinstance(t, ThinkingEnabled) and t.budget_tokens >= self.max_tokens:
            raise ValueError(
                f"thinking.budget_tokens ({t.budget_tokens}) must be below max_tokens ({self.max_tokens}); "
                "lower the budget or raise max_tokens"
            )
        if self.guided_grammar is not None and self.output_config and self.output_config.format:
            raise ValueError("give one of output_config.format and guided_grammar")
        if self.guided_grammar is not None and isinstance(self.tool_choice, ToolChoiceAny | ToolChoiceTool):
            raise ValueError(f"tool_choice {self.tool_choice.type!r} constrains the output; leave out guided_grammar")
        return self

    def user(self) -> str | None:
        return self.metadata.user_id if self.metadata else None


def check_blocks(messages: Any) -> None:
    """ValueError naming the first block whose type its role does not take (`messages.2.content.0.type`)."""
    if not isinstance(messages, list):
        return
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), list):
            continue
        allowed = ROLE_BLOCKS.get(m.get("role"), ())
        for j, block in enumerate(m["content"]):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in allowed or not allowed:
                continue
            where = f"messages.{i}.content.{j}.type"
            if kind in _LATER:
                raise ValueError(f"{where}: {kind} blocks are not supported yet; send the content as text")
            raise ValueError(f"{where}: {m['role']} turns take {' and '.join(allowed)} blocks, not {kind!r}")


def check_tools(tools: Any) -> None:
    """Anthropic's server tools (web search, code execution, ...) run at Anthropic; refused by name."""
    if not isinstance(tools, list):
        return
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(
                f"tools.{i}.type: server tool {kind!r} is not available here; define it as a client tool "
                "with name, description and input_schema"
            )


def check_conversation(messages: list[Message]) -> None:
    """Each tool_result answers an earlier tool_use; the last turn is not the assistant's (prefill)."""
    calls: set[str] = set()
    for i, m in enumerate(messages):
        for j, b in enumerate(m.blocks()):
            if isinstance(b, ToolUseBlock):
                calls.add(b.id)
            elif isinstance(b, ToolResultBlock) and b.tool_use_id not in calls:
                raise ValueError(
                    f"messages.{i}.content.{j}.tool_use_id: no earlier tool_use block has id {b.tool_use_id!r}; "
                    "a tool_result answers a tool_use of an earlier assistant turn"
                )
    if messages[-1].role == "assistant":
        raise ValueError(
            f"messages.{len(messages) - 1}: a final assistant turn (prefill) is not supported; end with a user turn"
        )
