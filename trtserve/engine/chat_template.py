"""Chat templates rendered the way transformers' `apply_chat_template` renders them, without importing
transformers (a second of a cold start): the same sandboxed jinja2 environment (trim_blocks,
lstrip_blocks, loop controls), the same globals and filters (raise_exception, strftime_now, tojson
with ensure_ascii=False, dict, namespace), and the same clean-up of the messages first (None values
dropped, reasoning fields aliased, everything copied into plain JSON types).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # the first is what templates read


@functools.lru_cache(maxsize=16)
def compile_template(source: str):
    """The compiled template (cached by its text); jinja2 raises TemplateSyntaxError for a broken one."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja's own tojson escapes HTML characters; templates expect plain JSON
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class TemplateDict:  # `dict(...)` without attribute access to the type itself
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):  # jinja's own signature trick, so `namespace(self=...)` works
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):  # no dunder attributes: they lead to the interpreter's internals
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes on a namespace ({name!r})"
                )

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(source)


def plain(value):
    """`value` rebuilt from plain JSON types (what the sandbox may see); anything else becomes a
    placeholder naming its type, as transformers does."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for base in (str, int, float):
        if isinstance(value, base):
            return base(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if callable(getattr(value, "model_dump", None)):  # pydantic models
        return plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _message(message) -> dict:
    if callable(getattr(message, "model_dump", None)):
        message = message.model_dump()
    if not isinstance(message, dict):
        raise TypeError(f"chat messages should be dicts, but got {message!r}")
    message = {k: v for k, v in message.items() if v is not None}  # `content: null` breaks many templates
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:  # gpt-oss templates read `thinking`, the others `reasoning_content`
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return plain(message)


def render(source: str, messages, *, tools=None, documents=None, add_generation_prompt=False, **kwargs) -> str:
    """The template's text for one conversation; kwargs (special tokens, template options) are template variables."""
    if tools is not None and any(not isinstance(t, dict) for t in tools):
        raise ValueError("tools must be JSON schemas (dicts)")
    if documents is not None and any(not isinstance(d, dict) for d in documents):
        raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    return compile_template(source).render(
        messages=[_message(m) for m in messages],
        tools=plain(tools),
        documents=plain(documents),
        add_generation_prompt=add_generation_prompt,
        **plain(kwargs),
    )
