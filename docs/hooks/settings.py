"""MkDocs hook: the settings reference, rendered from the pydantic models at build time.

A page marks where a table goes with `<!-- settings: module:Class -->` (every field of the model:
type, default and the comment beside or above it in the source) or `<!-- engine-options -->` (the
OPTIONS table of trtserve/engine/options.py). Nothing is written by hand, so the page cannot drift
from the code; tests/unit/test_settings_reference.py checks that every field is rendered.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import io
import re
import tokenize
import types
import typing
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ByteSize

MARKER = re.compile(r"<!--\s*settings:\s*([\w.]+):(\w+)\s*-->")
OPTIONS_MARKER = "<!-- engine-options -->"


def resolve(spec: str) -> type[BaseModel]:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@cache
def _source(cls: type) -> tuple[ast.ClassDef, dict[int, str], list[str]]:
    """The class's AST node, its module's comments by line number, and the module's lines."""
    text = Path(inspect.getsourcefile(cls)).read_text()
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    }
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    return node, comments, text.splitlines()


def _owner(model: type[BaseModel], field: str) -> type:
    """The class in the model's MRO whose body declares the field (RuntimeConfig inherits EngineOptions)."""
    return next(c for c in model.__mro__ if field in getattr(c, "__annotations__", {}))


def field_comment(model: type[BaseModel], field: str) -> str:
    """The field's description, else its comment: the block above it (shared by the fields that follow
    it without a blank line or a comment of their own) and the one at the end of its line."""
    info = model.model_fields[field]
    if info.description:
        return info.description
    node, comments, lines = _source(_owner(model, field))
    stmts = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    idx = next(i for i, s in enumerate(stmts) if s.target.id == field)
    stmt = stmts[idx]
    trailing = [comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
    above = _block_above(stmt.lineno, comments, lines)
    if not above and not trailing:
        # A field with no comment of its own shares the block that introduces its group of fields
        # (contiguous, none with a trailing comment) when that block names it.
        first = stmt.lineno
        for prev in reversed(stmts[:idx]):
            if prev.end_lineno != first - 1 or any(n in comments for n in range(prev.lineno, prev.end_lineno + 1)):
                break
            first = prev.lineno
            block = _block_above(first, comments, lines)
            if block:
                named = field in " ".join(block) or field.replace("_", "-") in " ".join(block)
                above = block if named else []
                break
    text = " ".join(above)
    if text and trailing:
        text = text if text.endswith((".", ":", ";")) else text + "."
        first_word = trailing[0]
        trailing[0] = first_word[:1].upper() + first_word[1:]
    return " ".join(([text] if text else []) + trailing)


def _block_above(lineno: int, comments: dict[int, str], lines: list[str]) -> list[str]:
    """The comment lines directly above a statement."""
    block = []
    n = lineno - 1
    while n > 0 and lines[n - 1].strip().startswith("#"):
        block.insert(0, comments[n])
        n -= 1
    return block


def _literal(values: tuple) -> str:
    return " | ".join(_yaml(v) for v in values)


def type_text(model: type[BaseModel], field: str) -> str:
    """The annotation as a reader writes YAML for it: Literal values spelled out, None as null."""
    info = model.model_fields[field]
    ann = info.annotation
    args = typing.get_args(ann)
    if typing.get_origin(ann) is typing.Literal:
        text = _literal(args)
    elif isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union:
        parts = [a for a in args if a is not type(None)]
        inner = [_literal(typing.get_args(a)) if typing.get_origin(a) is typing.Literal else _name(a) for a in parts]
        text = " | ".join(inner + (["null"] if len(parts) < len(args) else []))
    else:
        text = _name(ann)
    bounds = []
    for m in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                bounds.append(f"{sign} {getattr(m, attr)}")
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _name(tp) -> str:
    if isinstance(tp, type) and issubclass(tp, ByteSize):
        return "bytes"
    if isinstance(tp, type) and issubclass(tp, Path):
        return "path"
    origin = typing.get_origin(tp)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_name(a) for a in typing.get_args(tp))}]"
    return getattr(tp, "__name__", str(tp))


def _yaml(value) -> str:
    """A default as it would appear in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, ByteSize):
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if value and value % (1 << shift) == 0:
                return f"{value >> shift}{unit}"
        return str(int(value))
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def default_text(model: type[BaseModel], field: str) -> str:
    info = model.model_fields[field]
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return f"see {type(value).__name__}"
    return _yaml(value)


def _cell(text: str) -> str:
    """Markdown table cell: code spans as HTML (so a `|` in them stays one cell), the rest escaped."""
    out = []
    for i, part in enumerate(text.split("`")):
        part = html.escape(part, quote=False).replace("|", "&#124;")
        out.append(f"<code>{part}</code>" if i % 2 else part)
    return "".join(out)


def render_model(model: type[BaseModel]) -> str:
    """One row per field: name, type, default, what it does."""
    rows = ["| setting | type | default | what it does |", "| --- | --- | --- | --- |"]
    for field, info in model.model_fields.items():
        what = field_comment(model, field)
        if not what and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            what = f"a section of its own: the {info.annotation.__name__} table"
        rows.append(
            f"| <code>{field}</code> | <code>{_cell(type_text(model, field))}</code> "
            f"| <code>{_cell(default_text(model, field))}</code> | {_cell(what)} |"
        )
    return "\n".join(rows)


def render_options() -> str:
    """The run-time engine options table (trtserve/engine/options.py OPTIONS)."""
    from trtserve.engine.options import OPTIONS

    rows = [
        "| option | what it does | backends | in a receipt's identity | checked by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for spec in OPTIONS.values():
        rows.append(
            f"| <code>{spec.name}</code> | {_cell(spec.summary)} | {', '.join(sorted(spec.backends))} "
            f"| {'yes' if spec.in_identity else 'no'} | {_cell(f'`{spec.requires}`') if spec.requires else ''} |"
        )
    return "\n".join(rows)


def render(markdown: str) -> str:
    markdown = MARKER.sub(lambda m: render_model(resolve(f"{m[1]}:{m[2]}")), markdown)
    return markdown.replace(OPTIONS_MARKER, render_options()) if OPTIONS_MARKER in markdown else markdown


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs calls it with these names
    return render(markdown)
