"""One ASGI middleware for what every route shares: request ids, API keys, body limits, drain
state, the access log and the HTTP status metric. Pure ASGI, so streaming and client
disconnects pass through untouched."""

from __future__ import annotations

import json
import logging
import time
import uuid

from trtserve.serve.admin_key import bearer_matches
from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.context import RequestContext, access_line, open_context
from trtserve.serve.errors import APIError, error_body
from trtserve.serve.repository.admin import is_admin_path
from trtserve.serve.state import ServerState
from trtserve.serve.telemetry.tracing import TRACE_HEADERS, operation_of

access_log = logging.getLogger("trtserve.access")
HEALTH_PATHS = ("/health", "/health/ready", "/v2/health/live", "/v2/health/ready")
UNTRACED = (*HEALTH_PATHS, "/metrics")  # probes and scrapes get no trace


def body_limit(cfg, path: str) -> int:
    """Bytes a request body may have: batch input uploads (POST /v1/files) have their own limit,
    plus room for the multipart envelope."""
    return cfg.max_file_bytes + (64 << 10) if path == "/v1/files" else cfg.max_body_bytes


class ServerMiddleware:
    def __init__(self, app, server: ServerState):
        self.app = app
        self.server = server

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rid = headers.get("x-request-id") or uuid.uuid4().hex  # echoed and logged, never a key
        context = open_context(scope)  # routing and the generation path fill it in
        if path not in UNTRACED:  # the server span; the generation path adds its generations under it
            context.span = self.server.tracing.server_span(
                f"{scope['method']} {path}",
                {k: headers[k] for k in TRACE_HEADERS if k in headers},
                {"http.request.method": scope["method"], "url.path": path, "trtserve.request_id": rid},
                operation_of(path),
            )
        start = time.monotonic()
        status = {"code": 500}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode("latin-1"))]
                if context.version is not None:  # the repository version that answered (serve/repository/lookup.py)
                    message["headers"].append((b"x-model-version", context.version.encode("latin-1")))
                if context.receipts:  # the generations this request started (serve/receipts/)
                    message["headers"].append((b"x-trtserve-receipt", ",".join(context.receipts).encode()))
                for name, value in context.span.response_headers():  # X-Trace-Id, traceresponse
                    message["headers"].append((name.encode(), value.encode()))
            await send(message)

        try:
            problem = self._refuse(path, headers)
            if problem is not None:
                await self._error(send_with_id, path, *problem)
                return
            await self.app(scope, self._limited(receive, path), send_with_id)
        finally:
            self._log(scope, rid, status["code"], start, context)
            route = scope.get("route")  # the matched route's template, where routing got that far
            context.span.end(status["code"], status["code"] < 500, getattr(route, "path", None))

    def _refuse(self, path: str, headers: dict) -> tuple[int, str, dict] | None:
        cfg = self.server.config
        if len(headers.get("x-request-id", "")) > MAX_CLIENT_ID:
            return 400, f"X-Request-Id is longer than {MAX_CLIENT_ID} characters; send a shorter id", {}
        if path in HEALTH_PATHS:
            return None
        # Admin routes check the admin key themselves.
        if (
            cfg.api_key
            and not is_admin_path(path)
            and not bearer_matches(headers.get("authorization", ""), cfg.api_key)
        ):
            return (
                401,
                "missing or wrong API key; send the header `Authorization: Bearer <key>`",
                {"WWW-Authenticate": "Bearer"},
            )
        if self.server.draining:
            return 503, "the server is shutting down; retry on another replica", {"Retry-After": "5"}
        if self.server.asleep and not is_admin_path(path) and path != "/metrics":
            return 503, "the server is asleep (POST /admin/wake_up wakes it); retry later", {"Retry-After": "5"}
        if not self.server.loaded and path not in ("/metrics", "/openapi.json"):
            return 503, "the model is still loading; retry when /v2/health/ready returns 200", {"Retry-After": "2"}
        length = headers.get("content-length")
        if length is not None and length.isascii() and length.isdigit() and int(length) > body_limit(cfg, path):
            return 413, f"the request body has {length} bytes; the limit is {body_limit(cfg, path)}", {}
        return None

    def _limited(self, receive, path: str):
        limit, seen = body_limit(self.server.config, path), 0

        async def wrapped():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise APIError(413, f"the request body exceeds the limit of {limit} bytes")
            return message

        return wrapped

    @staticmethod
    async def _error(send, path: str, status: int, message: str, headers: dict) -> None:
        body = json.dumps(error_body(path, status, message)).encode()
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    def _log(self, scope, rid: str, status: int, start: float, context: RequestContext) -> None:
        metrics = self.server.metrics
        if metrics is not None:
            # the model and version the repository routed this request to, when it named one
            metrics.http.labels(context.model or metrics.model, context.version or "", str(status)).inc()
        line = {
            "request_id": rid,
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "duration_ms": round((time.monotonic() - start) * 1000, 1),
            **context.log_fields(),
        }
        access_log.info(access_line(line, self.server.config.access_log_format))
