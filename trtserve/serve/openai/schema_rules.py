"""The request rules of serve/openai/protocol.py that span fields, as JSON Schema for /openapi.json,
so that a client (or a schema fuzzer) can tell a valid request from one the server refuses.

Each function is the `json_schema_extra` of a model: it adds an `allOf` of rules to the schema
pydantic made. What JSON Schema cannot say (a token id below the model's vocabulary size,
min_tokens <= max_tokens, best_of equal to n, a tool_choice naming one of the tools, a grammar that
compiles) the field descriptions say instead.
"""

from __future__ import annotations

from typing import Any

# A logit_bias key: an int32 token id as ASCII digits (at most 10, surrounding spaces allowed).
TOKEN_ID_KEY = (
    r"^\s*([0-9]{1,9}|[01][0-9]{9}|20[0-9]{8}|21[0-3][0-9]{7}|214[0-6][0-9]{6}|2147[0-3][0-9]{5}"
    r"|21474[0-7][0-9]{4}|214748[0-2][0-9]{3}|2147483[0-5][0-9]{2}|21474836[0-3][0-9]|214748364[0-7])\s*$"
)
TOKEN_IDS = "token ids below the model's vocabulary size (a per-model bound the schema cannot state)"
# SamplingFields._stops: one or at most 16 stop strings, none empty.
_STOP = {"type": "string", "minLength": 1}
STOP = {"anyOf": [_STOP, {"type": "array", "items": _STOP, "maxItems": 16}, {"type": "null"}]}
GUIDES = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")


def present(field: str, schema: dict | None = None) -> dict:
    """The body has `field`, not null (and matching `schema`, when given)."""
    return {"required": [field], "properties": {field: schema or {"not": {"type": "null"}}}}


def absent(field: str, schema: dict | None = None) -> dict:
    """The body has no `field`, or a null one (or one matching `schema`, which also counts as absent)."""
    null = {"type": "null"}
    return {"properties": {field: {"anyOf": [null, schema]} if schema else null}}


# The rules are written as anyOf of plain alternatives, not if/then or not: schemathesis generates
# from their canonical form, and negations of several rules together grew too large for it.
_TEXT_FORMAT = {"type": "object", "properties": {"type": {"const": "text"}}}
_CONSTRAINTS = {"response_format": _TEXT_FORMAT} | {g: None for g in GUIDES}  # field -> what counts as absent


def _only(field: str | None) -> dict:
    """`field` is the one output constraint given (None: there is none); a tool_choice that forces a
    call (required, or a named function) is one too."""
    parts = [present(field), absent("tool_choice", {"enum": ["auto", "none"]})] if field else []
    parts += [absent(f, other) for f, other in _CONSTRAINTS.items() if f != field]
    return {"allOf": parts}


def _at_most_one_guide(tools: bool) -> dict:
    only = [_only(f) for f in _CONSTRAINTS]
    if not tools:  # /v1/completions has no tool_choice
        for rule in only:
            rule["allOf"].pop(1)
    return {"anyOf": [_only(None)] + only}


def sampling_rules(schema: dict[str, Any], tools: bool = False) -> None:
    """SamplingFields: at most one output constraint."""
    props = schema.get("properties", {})
    # Relations JSON Schema cannot state between two values, or could only at a size schemathesis
    # cannot generate from (its canonical form of every rule together grows past its limit).
    _describe(props, "min_tokens", "At most max_tokens (a larger min_tokens is refused).")
    _describe(props, "best_of", "Equal to n when given (best_of other than n is refused).")
    _describe(props, "stream_options", "Only with stream: true.")
    _describe(props, "stop_token_ids", TOKEN_IDS.capitalize() + ".")
    _describe(props, "logit_bias", "Token id (below the model's vocabulary size) -> bias in [-100, 100].")
    for g in GUIDES:
        _describe(props, g, "Must compile into a grammar; one that does not is refused (400).")
    schema.setdefault("allOf", []).append(_at_most_one_guide(tools))


def chat_rules(schema: dict[str, Any]) -> None:
    """ChatCompletionRequest: the sampling rules, with a tool_choice that forces a call counted as an
    output constraint; top_logprobs only with logprobs: true; a tool_choice other than none only
    with tools."""
    sampling_rules(schema, tools=True)
    schema["allOf"] += [
        {"anyOf": [absent("top_logprobs"), present("logprobs", {"const": True})]},
        {"anyOf": [absent("tool_choice", {"const": "none"}), present("tools", {"type": "array", "minItems": 1})]},
    ]
    _describe(schema.get("properties", {}), "tool_choice", "A named function must be one of `tools`.")


def response_format_rules(schema: dict[str, Any]) -> None:
    """ResponseFormat: json_schema exactly when type is "json_schema"."""
    schema["anyOf"] = [
        present("type", {"const": "json_schema"}) | {"required": ["type", "json_schema"]},
        {"allOf": [present("type", {"enum": ["text", "json_object"]}), absent("json_schema")]},
    ]
    schema["anyOf"][0]["properties"]["json_schema"] = {"not": {"type": "null"}}


def tokenize_rules(schema: dict[str, Any]) -> None:
    """TokenizeRequest: exactly one of prompt or messages, each non-null when given."""
    not_null(schema, "prompt", "messages")
    schema["oneOf"] = [{"required": ["prompt"]}, {"required": ["messages"]}]


def not_null(schema: dict[str, Any], *fields: str) -> None:
    """Drop null from the fields' types: the server reads a null as absent, and a rule that counts
    the fields given (oneOf) would count it as given."""
    for field in fields:
        prop = schema["properties"][field]
        kinds = [k for k in prop.pop("anyOf") if k.get("type") != "null"]
        prop.update(kinds[0] if len(kinds) == 1 else {"anyOf": kinds})
        prop.pop("default", None)


def _describe(props: dict, field: str, text: str) -> None:
    if field in props:
        props[field]["description"] = text
