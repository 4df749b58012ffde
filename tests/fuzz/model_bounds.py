"""What one schema for every model cannot state, kept within the served model's bounds on the
cases schemathesis generates as valid: /openapi.json says these rules in words (descriptions), and
a valid case that broke one would rightly be refused, which is not a schema bug.

- token ids below the model's vocabulary size (prompt ids, stop_token_ids, logit_bias keys, end_id,
  /detokenize tokens);
- a prompt that fits the context with max_tokens (texts and conversations are cut short);
- min_tokens <= max_tokens, best_of == n (relations between two values), and stream_options only
  with stream: true (a rule the schema could state only at a size schemathesis cannot generate from);
- guides that compile into a grammar (JSON schemas, regexes, EBNF, tool parameters);
- a tool_choice that names one of the tools, and no guide beside a tool_choice that forces a call (it
  constrains the output itself: both is a documented 400);
- on /v1/responses the same, in its own shapes (input items, flat tools, text.format), and no
  previous_response_id (one the server never stored is a documented 404);
- an infer tensor's shape that matches its data, each input given once;
- and one thing of schemathesis's own: an integer past 2**53 may reach the server as another
  integer (sent as a whole float, -2**63 arrived as -9223372036854776000, past the int64 minimum);
  such values become +-2**53, inside the range of every field that can take them.
"""

from __future__ import annotations

from typing import Any

VOCAB = 256  # below the tiny model's vocabulary (320) and its tokenizer's (312): tests/helpers.py
TEXT = 10  # characters a text keeps: a few dozen tokens at most, however exotic the characters
GUIDES = {
    "guided_json": {"type": "object"},
    "guided_regex": "[a-z]{1,3}",
    "guided_grammar": 'root ::= "a" | "b"',
    "guided_choice": ["a", "b"],
}
KSERVE_GUIDES = {"json_schema": '{"type": "object"}', "regex": "[a-z]{1,3}", "ebnf_grammar": 'root ::= "a"'}
LENGTHS = ("max_tokens", "max_completion_tokens", "min_tokens")


def is_int(v: Any) -> bool:
    """A JSON integer as schemathesis may send it (4 or 4.0)."""
    return not isinstance(v, bool) and isinstance(v, int | float) and float(v).is_integer()


def short(v: Any) -> Any:
    return v[:TEXT] if isinstance(v, str) else v


def token(v: Any) -> Any:
    return int(v) % VOCAB if is_int(v) and v >= 0 else v


def cap_lengths(body: dict) -> None:
    """Valid lengths are cut to a few tokens, so a few hundred cases take seconds (KServe's may come
    as [n]); min_tokens to 1, within any max_tokens, here or under `parameters`."""
    for key in LENGTHS:
        v = body.get(key)
        one = v[0] if isinstance(v, list) and len(v) == 1 else v
        cap = 1 if key == "min_tokens" else 4
        if is_int(one) and one > cap:
            body[key] = [cap] if isinstance(v, list) else cap


def exact_floats(value: Any) -> Any:
    """Integers (or whole floats) past 2**53, which may not arrive as sent -> +-2**53, everywhere in `value`."""
    if is_int(value) and abs(value) > 2**53:
        return type(value)(2**53 if value > 0 else -(2**53))
    if isinstance(value, dict):
        return {k: exact_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [exact_floats(v) for v in value]
    return value


def within_the_model(path: str, body: Any) -> None:
    if not isinstance(body, dict):
        return
    body.update(exact_floats(body))
    if path == "/v1/responses":
        _responses(body)
        return
    if path.startswith("/v1/messages"):
        _anthropic(body)
        return
    cap_lengths(body)
    if body.get("best_of") is not None:
        body["best_of"] = body.get("n", 1)
    if body.get("stream_options") is not None:
        body["stream"] = True
    _prompt(body)
    _ids(body)
    _messages(body)
    _guides(body)
    _tools(body)
    if isinstance(body.get("parameters"), dict) and not path.endswith("/infer"):
        within_the_model(path, body["parameters"])
    if path.endswith("/infer"):
        _infer(body)


def _prompt(body: dict) -> None:
    p = body.get("prompt")
    if isinstance(p, str):
        body["prompt"] = short(p)
    elif isinstance(p, list):
        p = p[:2]
        body["prompt"] = [[token(t) for t in x[:TEXT]] if isinstance(x, list) else token(short(x)) for x in p]
    t = body.get("text_input")
    if isinstance(t, str):
        body["text_input"] = short(t)
    elif isinstance(t, list):
        body["text_input"] = [short(x) for x in t]


def _ids(body: dict) -> None:
    for key in ("tokens", "stop_token_ids"):
        if isinstance(body.get(key), list):
            body[key] = [token(t) for t in body[key]]
    if "end_id" in body:
        end = body["end_id"]
        body["end_id"] = [token(t) for t in end] if isinstance(end, list) else token(end)
    if isinstance(body.get("logit_bias"), dict):
        body["logit_bias"] = {str(token(int(k.strip()))): v for k, v in body["logit_bias"].items()}


IMAGES = ("image_url", "input_image", "image")  # chat, Responses and Anthropic image parts


def _no_images(parts: list) -> list:
    """The fuzzed model is text-only: an image there is a documented 400 (tests/api/test_vision_live.py),
    so each image part becomes a text part."""
    return [{"type": "text", "text": "x"} if isinstance(p, dict) and p.get("type") in IMAGES else p for p in parts]


def _messages(body: dict) -> None:
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return
    body["messages"] = msgs = msgs[:2]
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if isinstance(m.get("content"), list):
            m["content"] = _no_images(m["content"][:2])
            for part in m["content"]:
                if isinstance(part, dict) and "text" in part:
                    part["text"] = short(part["text"])
        else:
            m["content"] = short(m.get("content"))
        for key in ("name", "tool_call_id"):
            if key in m:
                m[key] = short(m[key])
        if isinstance(m.get("tool_calls"), list):
            m["tool_calls"] = m["tool_calls"][:1]
            for c in m["tool_calls"]:
                if isinstance(c, dict) and isinstance(c.get("function"), dict):
                    c["id"] = short(c.get("id"))
                    c["function"] = {"name": short(c["function"].get("name")), "arguments": "{}"}


def _guides(body: dict) -> None:
    for key, valid in GUIDES.items():
        if body.get(key) is not None:
            body[key] = valid
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        fmt["json_schema"]["schema"] = {"type": "object"}
    kind = body.get("guided_decoding_guide_type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind in KSERVE_GUIDES:
        body["guided_decoding_guide"] = KSERVE_GUIDES[kind]


def _tools(body: dict) -> None:
    """Chat Completions' tools ({"type": "function", "function": {...}}); other shapes are left alone."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools
    ):
        return
    body["tools"] = tools = tools[:2]
    for t in tools:
        t["function"]["parameters"] = {"type": "object", "properties": {}}
        t["function"].pop("description", None)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict) and tools:
        choice["function"]["name"] = tools[0]["function"]["name"]
    _one_constraint(body, "response_format")


def _responses(body: dict) -> None:
    """POST /v1/responses: a short conversation, flat tools ({"type": "function", "name": ...}), a
    few output tokens, and no previous_response_id (one the server never stored is a documented 404)."""
    n = body.get("max_output_tokens")
    if not is_int(n) or n > 4:  # unset, it is the rest of the context
        body["max_output_tokens"] = 4
    body.pop("previous_response_id", None)
    if body.get("guided_grammar") is not None:  # a random string is no grammar: a documented 400
        body["guided_grammar"] = 'root ::= "a" | "b"'
    if "instructions" in body:
        body["instructions"] = short(body["instructions"])
    items = body.get("input")
    if isinstance(items, list):
        body["input"] = items = items[:2]
        for item in items:
            if isinstance(item, dict):
                _item(item)
        if all(isinstance(i, dict) and i.get("type") == "reasoning" for i in items):
            items.append({"role": "user", "content": "hi"})  # reasoning alone is no conversation: a 400
    else:
        body["input"] = short(items)
    tools = body.get("tools")
    if isinstance(tools, list):
        body["tools"] = tools = tools[:2]
        for t in tools:
            if isinstance(t, dict):
                t["parameters"] = {"type": "object", "properties": {}}
                t.pop("description", None)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and tools:
        choice["name"] = tools[0].get("name")
    fmt = body.get("text", {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        fmt["schema"] = {"type": "object"}
    if _one_constraint(body) and isinstance(body.get("text"), dict):
        body["text"].pop("format", None)


def _one_constraint(body: dict, *formats: str) -> bool:
    """A tool_choice that forces a call (required, or a named tool) with tools constrains the output; a guide
    beside it is a documented 400, so the guides (and `formats`) go. Whether it forces one."""
    choice = body.get("tool_choice")
    forces = bool(body.get("tools")) and (choice == "required" or isinstance(choice, dict))
    if forces:
        for key in (*GUIDES, *formats):
            body.pop(key, None)
    return forces


def _item(item: dict) -> None:
    """One input item: its text (content, output, arguments, each part's text) cut short."""
    for key in ("content", "output", "arguments"):
        v = item.get(key)
        if isinstance(v, list):
            item[key] = v = [
                {"type": "input_text", "text": "x"} if isinstance(q, dict) and q.get("type") in IMAGES else q
                for q in v[:2]
            ]
            for part in v:
                for text in ("text", "refusal"):
                    if isinstance(part, dict) and text in part:
                        part[text] = short(part[text])
        elif key in item:
            item[key] = short(v)


def _infer(body: dict) -> None:
    seen, kept = set(), []
    for t in body.get("inputs") or []:
        if not isinstance(t, dict) or t.get("name") in seen:
            continue
        seen.add(t.get("name"))
        kept.append(t)
        data = t.get("data")
        if t.get("name") == "text_input" and isinstance(data, list):
            t["data"] = [short(x) for x in data[:2]]
            t["shape"] = [len(t["data"])]
        elif isinstance(data, list) and data:
            values = {t.get("name"): data[0]}
            cap_lengths(values)
            _ids(values)
            t["data"] = [values[t.get("name")]]
    body["inputs"] = kept
    if isinstance(body.get("parameters"), dict):
        within_the_model("", body["parameters"])


def _anthropic(body: dict) -> None:
    """POST /v1/messages and count_tokens: a short conversation that ends on a user turn, whose
    tool_results answer its tool_uses, tools with trivial schemas, a named tool among them, a
    thinking without a budget (one fits no tiny context) and no grammar that might not compile."""
    cap_lengths(body)
    system = body.get("system")
    if isinstance(system, str):
        body["system"] = short(system)
    elif isinstance(system, list):
        body["system"] = [{**b, "text": short(b.get("text"))} if isinstance(b, dict) else b for b in system[:1]]
    msgs = body.get("messages")
    if isinstance(msgs, list):
        msgs = msgs[:2]
        if msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "assistant":
            msgs.append({"role": "user", "content": "hi"})  # a final assistant turn (prefill) is refused
        body["messages"] = msgs
        for m in msgs:
            if isinstance(m, dict) and isinstance(m.get("content"), list):
                # a tool_result answers a tool_use of an earlier turn, which a generated one rarely does
                m["content"] = _no_images(
                    [b for b in m["content"][:2] if not (isinstance(b, dict) and b.get("type") == "tool_result")]
                )
                for b in m["content"]:
                    for key in ("text", "thinking", "name"):
                        if isinstance(b, dict) and key in b:
                            b[key] = short(b[key])
                    if isinstance(b, dict) and b.get("type") == "tool_use":
                        b["input"] = {}
            elif isinstance(m, dict):
                m["content"] = short(m.get("content"))
    tools = body.get("tools")
    if isinstance(tools, list):
        body["tools"] = tools = tools[:2]
        for t in tools:
            if isinstance(t, dict):
                t["input_schema"] = {"type": "object", "properties": {}}
                t["name"] = short(t.get("name"))
                t.pop("description", None)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool" and tools:
        choice["name"] = tools[0].get("name")
    fmt = body.get("output_config", {}).get("format") if isinstance(body.get("output_config"), dict) else None
    if isinstance(fmt, dict):
        fmt["schema"] = {"type": "object"}
    if body.get("guided_grammar") is not None:
        body["guided_grammar"] = 'root ::= "a" | "b"'
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        # a budget is at least 1024 and below max_tokens (Anthropic's rule): past this model's context, so
        # the same path without a budget (the budget itself: tests/api/test_thinking_budget.py)
        body["thinking"] = {"type": "adaptive"}
