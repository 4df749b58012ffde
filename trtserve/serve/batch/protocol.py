"""Batch API bodies and objects, field for field as OpenAI's (files, batches, lines)."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from trtserve.serve.json_body import JsonBody

ENDPOINTS = ("/v1/completions", "/v1/chat/completions")
FINAL = ("completed", "failed", "expired", "cancelled")
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
_WINDOW = re.compile(r"([0-9]+)([smhd])")  # fullmatch; ASCII digits (\d takes any script's)
# The same rule as a JSON-schema pattern (/openapi.json): N s|m|h|d, more than 0 and at most 7 days.
WINDOW_PATTERN = (
    r"^0*(?:([1-9][0-9]{0,4}|[1-5][0-9]{5}|60[0-3][0-9]{3}|604[0-7][0-9]{2}|604800)s"
    r"|([1-9][0-9]{0,3}|100[0-7][0-9]|10080)m|([1-9][0-9]?|1[0-5][0-9]|16[0-8])h|[1-7]d)$"
)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_WINDOW = 7 * 86400


def window_seconds(window: str) -> int:
    """ "24h" (OpenAI's only value) -> 86400; trtserve also takes N s|m|h|d up to 7 days."""
    m = _WINDOW.fullmatch(window)
    if not m or not 0 < int(m[1]) * _UNIT[m[2]] <= MAX_WINDOW:
        raise ValueError('give a duration such as "24h" (N followed by s, m, h or d; at most 7 days)')
    return int(m[1]) * _UNIT[m[2]]


class BatchCreate(JsonBody):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str
    endpoint: Literal["/v1/completions", "/v1/chat/completions"]
    completion_window: str = Field("24h", json_schema_extra={"pattern": WINDOW_PATTERN})
    metadata: dict[str, str] | None = Field(None, max_length=16)
    output_expires_after: dict | None = None  # accepted for compatibility; outputs are kept until deleted

    @field_validator("completion_window")
    @classmethod
    def _window(cls, v: str) -> str:
        window_seconds(v)
        return v


def file_object(row: sqlite3.Row) -> dict:
    return {
        "id": row["id"],
        "object": "file",
        "bytes": row["bytes"],
        "created_at": row["created_at"],
        "filename": row["filename"],
        "purpose": row["purpose"],
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    }


def batch_object(row: sqlite3.Row) -> dict:
    errors = json.loads(row["errors"]) if row["errors"] else None
    stamps = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at")
    return {
        "id": row["id"],
        "object": "batch",
        "endpoint": row["endpoint"],
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": row["input_file_id"],
        "completion_window": row["completion_window"],
        "status": row["status"],
        "output_file_id": row["output_file_id"],
        "error_file_id": row["error_file_id"],
        "created_at": row["created_at"],
        "expires_at": row["expires_at"],
        **{k: row[k] for k in stamps},
        "cancelled_at": row["cancelled_at"],
        "request_counts": {"total": row["total"], "completed": row["completed"], "failed": row["failed"]},
        "metadata": json.loads(row["metadata"]) if row["metadata"] else None,
    }


def page(data: list[dict], has_more: bool) -> dict:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def output_line(line_id: str, custom_id: str, status: int, request_id: str, body: dict) -> dict:
    """A line of the output file (2xx) or the error file (any other status)."""
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }


def error_line(line_id: str, custom_id: str, code: str, message: str) -> dict:
    """A line of the error file for a request that never ran (the batch expired or was cancelled)."""
    return {"id": line_id, "custom_id": custom_id, "response": None, "error": {"code": code, "message": message}}
