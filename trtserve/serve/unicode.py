"""JSON may carry strings no tokenizer can encode: a lone UTF-16 surrogate ("\\ud800") is valid JSON
but not Unicode. Found by tests/fuzz (a 500 from the tokenizer); refused here with a 400 instead."""

from __future__ import annotations


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


def check_unicode(obj) -> None:
    """Raise ValueError naming the field if a string in `obj` is not valid Unicode."""
    where = lone_surrogate_at(obj)
    if where is not None:
        raise ValueError(f"{where} holds a lone UTF-16 surrogate (not valid Unicode); send valid UTF-8 text")
