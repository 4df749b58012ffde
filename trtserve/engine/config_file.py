"""YAML config files (build and run presets) and pydantic errors as one sentence."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from trtserve.engine.errors import UserError


def describe_validation_error(err: ValidationError, source: str, model: type[BaseModel]) -> str:
    """One sentence naming each bad field and why, for a pydantic error."""
    parts = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "config"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            msg = f"unknown key (allowed: {allowed})"
        elif e["type"] == "literal_error":
            msg = f"got {e.get('input')!r}; {msg[0].lower()}{msg[1:]}"
        parts.append(f"'{field}': {msg}")
    return f"invalid {source}: " + "; ".join(parts)


def read_yaml(path: Path) -> dict:
    """Read a YAML mapping, turning every failure into a UserError naming the file."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UserError(f"cannot read config file {path}: {err.strerror}; check the path") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise UserError(f"config file {path} is not valid YAML ({problem}{where}); fix its syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data
