"""JSON may carry strings no tokenizer can encode: a lone UTF-16 surrogate ("\\ud800") is valid JSON
but not Unicode. Found by tests/fuzz (a 500 from the tokenizer); refused here with a 400 instead."""

from __future__ import annotations

import re

# A lone surrogate reaches Python only through a JSON escape \uD800-\uDFFF (raw UTF-8 bytes of one fail to decode).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate_at(obj) -> str | None:
    """The path of the first string (key or value) holding a lone surrogate, or None. Iterative:
    the body may be nested deeper than Python's recursion limit."""
    stack = [("", obj)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return path or "the body"
        elif isinstance(node, dict):
            for k, v in node.items():
                stack.append((f"{path}.{k}" if path else str(k), k))
                stack.append((f"{path}.{k}" if path else str(k), v))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
    return None


def check_unicode(obj, raw: bytes | None = None) -> None:
    """Raise ValueError naming the field if a string in `obj` is not valid Unicode. `raw`: the JSON
    text `obj` was parsed from; without a surrogate escape in it, `obj` is not walked."""
    if raw is not None and _SURROGATE_ESCAPE.search(raw) is None:
        return
    where = lone_surrogate_at(obj)
    if where is not None:
        raise ValueError(f"{where} holds a lone UTF-16 surrogate (not valid Unicode); send valid UTF-8 text")
