"""Calibration text: offline by default (docstrings of the Python standard library), or the
user's TXT / JSONL file; cut into fixed-length token windows at seeded random offsets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from trtserve.engine.errors import UserError

# Fixed order, so the default text (and every build) is reproducible on one Python version.
_STDLIB_MODULES = (
    "argparse", "asyncio", "collections", "contextlib", "csv", "dataclasses", "datetime", "decimal",
    "email", "enum", "fractions", "functools", "heapq", "http.client", "inspect", "io", "itertools",
    "json", "logging", "os", "pathlib", "pickle", "random", "re", "shutil", "socket", "sqlite3",
    "statistics", "string", "subprocess", "tarfile", "textwrap", "threading", "typing", "unittest",
    "urllib.parse", "uuid", "zipfile",
)  # fmt: skip
SEED = 1234


def stdlib_text() -> str:
    """The docstrings of a fixed list of standard-library modules and their public members."""
    import importlib
    import inspect

    docs = []
    for name in _STDLIB_MODULES:
        mod = importlib.import_module(name)
        docs.append(inspect.getdoc(mod) or "")
        for attr in sorted(a for a in dir(mod) if not a.startswith("_")):
            doc = inspect.getdoc(getattr(mod, attr, None))
            if doc and doc not in docs:
                docs.append(doc)
    return "\n\n".join(d for d in docs if d)


def read_text_file(path: Path) -> str:
    """A .txt file as is; a .jsonl file's `text` fields (or plain string lines) joined."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot read --calib-data {path}: {err.strerror}; check the path") from None
    except UnicodeDecodeError:
        raise UserError(f"--calib-data {path} is not UTF-8 text; give a .txt or .jsonl file") from None
    if Path(path).suffix.lower() != ".jsonl":
        return raw
    texts = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"--calib-data {path} line {n} is not valid JSON ({err.msg})") from None
        text = obj if isinstance(obj, str) else obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(text, str):
            raise UserError(f'--calib-data {path} line {n} has no "text" string; write one {{"text": ...}} per line')
        texts.append(text)
    return "\n\n".join(texts)


def calibration_batches(tokenizer, source: Path | None, size: int, seq_len: int) -> list[torch.Tensor]:
    """`size` windows of `seq_len` token ids (each (1, seq_len)), at seeded random offsets."""
    text = read_text_file(source) if source is not None else stdlib_text()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < seq_len:
        where = f"--calib-data {source}" if source else "the default calibration text"
        raise UserError(f"{where} has {len(ids)} tokens, fewer than --calib-seq-len {seq_len}; give more text")
    rng = random.Random(SEED)
    starts = [rng.randrange(len(ids) - seq_len + 1) for _ in range(size)]
    return [torch.tensor(ids[s : s + seq_len]).unsqueeze(0) for s in starts]
