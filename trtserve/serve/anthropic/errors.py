"""Anthropic's error shape, `{"type": "error", "error": {"type": ..., "message": ...}}`, and the edge
of /v1/messages: an ASGI middleware outside the server's own that takes Anthropic's `x-api-key`
as the API key and rewrites every error answer on these paths (the server's bodies, in OpenAI's
shape: validation, auth, limits, routing) into Anthropic's shape, with the same status."""

from __future__ import annotations

import json

from pydantic import BaseModel

PREFIX = "/v1/messages"
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class AnthropicErrorDetail(BaseModel):
    type: str  # invalid_request_error, authentication_error, not_found_error, overloaded_error, api_error, ...
    message: str  # one sentence: what was wrong (naming the field) and how to fix it


class AnthropicErrorBody(BaseModel):
    """Every non-2xx answer on /v1/messages, and the `error` event of a stream that failed."""

    type: str = "error"
    error: AnthropicErrorDetail


def error_type(status: int) -> str:
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_responses(*statuses: int) -> dict:
    """The OpenAPI `responses=` of a route: each error status, with Anthropic's body."""
    content = {"application/json": {"schema": AnthropicErrorBody.model_json_schema()}}
    return {s: {"description": f"{error_type(s)}", "content": content} for s in statuses}


class AnthropicEdge:
    """Pure ASGI, so streams pass through untouched; only error answers on PREFIX are buffered."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if b"x-api-key" in headers and b"authorization" not in headers:  # the SDK's and Claude Code's key
            scope = {**scope, "headers": [*scope["headers"], (b"authorization", b"Bearer " + headers[b"x-api-key"])]}
        start: dict | None = None  # an error's response start, held until its body is rewritten
        chunks: list[bytes] = []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if start is None:
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = _anthropic(start["status"], b"".join(chunks))
            kept = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-length", b"content-type")]
            kept += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({**start, "headers": kept})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)


def _anthropic(status: int, raw: bytes) -> bytes:
    """The server's error body (OpenAI's `{"error": {"message": ...}}`) in Anthropic's shape."""
    try:
        err = json.loads(raw)["error"]
        message = err["message"] if isinstance(err, dict) else str(err)
    except (ValueError, KeyError, TypeError):
        message = raw.decode("utf-8", "replace") or f"HTTP {status}"
    if status == 401:
        message = message.replace("send the header `Authorization: Bearer <key>`", "send `x-api-key: <key>`")
    return json.dumps(error_body(status, message)).encode()
