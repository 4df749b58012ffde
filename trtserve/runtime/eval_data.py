"""The text `trtserve eval` scores: the one shipped with the package, or the user's TXT or JSONL file."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from trtserve.engine.errors import UserError

DEFAULT_TEXT = "eval_text.txt"  # package data of trtserve.runtime: self-written prose and some code
DOC_SEPARATOR = "\n\n"  # joins the documents of a JSONL file into one stream


def default_text() -> str:
    return resources.files("trtserve.runtime").joinpath(DEFAULT_TEXT).read_text(encoding="utf-8")


def read_text(path: Path) -> str:
    """A TXT file as is, or the "text" fields of a JSONL file (.jsonl) joined by blank lines."""
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(
            f"{path} is not UTF-8 text; give a UTF-8 TXT file or a JSONL file with a 'text' field"
        ) from None
    except OSError as err:
        raise UserError(f"cannot read {path} ({err.strerror}); give a readable TXT or JSONL file") from None
    text = _join_jsonl(path, raw) if path.suffix.lower() == ".jsonl" else raw
    if not text.strip():
        raise UserError(f"{path} holds no text; give a file with at least a few sentences")
    return text


def _join_jsonl(path: Path, raw: str) -> str:
    docs = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}:{lineno} is not valid JSON; write one JSON object per line") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise UserError(f'{path}:{lineno} has no string "text" field; write objects like {{"text": "..."}}')
        docs.append(record["text"])
    return DOC_SEPARATOR.join(docs)


def tokenize(tokenizer, text: str, max_tokens: int | None) -> list[int]:
    """The text's token ids (with the tokenizer's own special tokens, e.g. a leading BOS), cut to max_tokens."""
    ids = list(tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])
    if max_tokens is not None:
        ids = ids[:max_tokens]
    if len(ids) < 2:
        raise UserError(
            f"the text is only {len(ids)} token{'s' if len(ids) != 1 else ''} long; perplexity needs at least 2"
        )
    return ids
