"""Server-sent events (serve/group.py merges several generation streams into one)."""

from __future__ import annotations

import json

DONE = "data: [DONE]\n\n"


def event(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"
