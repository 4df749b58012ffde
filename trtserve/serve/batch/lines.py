"""Reading a batch input file: one task per non-blank line, every problem named by line number."""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_TASKS = 50_000  # OpenAI's limit per batch
MAX_ERRORS = 100  # a batch that fails validation reports at most this many problems


@dataclass(frozen=True)
class Task:
    line: int  # 1-based line number in the input file
    custom_id: str
    body: dict  # the request body, validated when it runs (a bad one is that line's 400)


@dataclass(frozen=True)
class LineError:
    line: int | None
    code: str  # OpenAI's codes where it has one: invalid_json_line, duplicate_custom_id, empty_file, too_many_tasks
    message: str
    param: str | None = None

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


def parse(data: bytes, endpoint: str) -> tuple[list[Task], list[LineError]]:
    """-> (tasks, errors); the batch runs only when errors is empty."""
    tasks: list[Task] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return [], [LineError(None, "invalid_file", f"the input file is not UTF-8 text (byte {err.start})")]
    for n, raw in enumerate(text.splitlines(), start=1):
        if len(errors) >= MAX_ERRORS:
            break
        if not raw.strip():
            continue
        task = _task(n, raw, endpoint)
        if isinstance(task, LineError):
            errors.append(task)
        elif task.custom_id in seen:
            errors.append(
                LineError(
                    n,
                    "duplicate_custom_id",
                    f"line {n}: custom_id {task.custom_id!r} was already used on line {seen[task.custom_id]}; "
                    "give each request its own",
                    "custom_id",
                )
            )
        else:
            seen[task.custom_id] = n
            tasks.append(task)
    if not tasks and not errors:
        errors.append(LineError(None, "empty_file", "the input file has no requests; give one JSON object per line"))
    if len(tasks) > MAX_TASKS:
        errors.append(
            LineError(None, "too_many_tasks", f"the input file has {len(tasks)} requests; at most {MAX_TASKS}")
        )
    return tasks, errors


def _task(n: int, raw: str, endpoint: str) -> Task | LineError:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as err:
        return LineError(n, "invalid_json_line", f"line {n} is not valid JSON ({err.msg} at column {err.colno})")
    if not isinstance(obj, dict):
        return LineError(
            n, "invalid_json_line", f"line {n} is not a JSON object; give {{custom_id, method, url, body}}"
        )
    extra = sorted(set(obj) - {"custom_id", "method", "url", "body"})
    if extra:
        return LineError(n, "invalid_request", f"line {n} has unknown field {extra[0]!r}", extra[0])
    cid = obj.get("custom_id")
    if not isinstance(cid, str) or not cid:
        return LineError(n, "invalid_request", f"line {n}: custom_id must be a non-empty string", "custom_id")
    if obj.get("method") != "POST":
        return LineError(n, "invalid_request", f'line {n}: method must be "POST"', "method")
    if obj.get("url") != endpoint:
        return LineError(
            n, "invalid_url", f"line {n}: url is {obj.get('url')!r} but this batch's endpoint is {endpoint!r}", "url"
        )
    if not isinstance(obj.get("body"), dict):
        return LineError(n, "invalid_request", f"line {n}: body must be a JSON object (the request)", "body")
    return Task(n, cid, obj["body"])
