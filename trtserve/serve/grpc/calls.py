"""What every gRPC call shares, as serve/middleware.py does for HTTP: the API key (`authorization`
metadata), loading and drain state, status codes for our errors, one access-log line and one metric
sample per inference request (or per call that carries none).

Status codes follow HTTP's: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 429
RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, our bugs INTERNAL.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid

import grpc

from trtserve.engine.errors import UserError
from trtserve.serve.admin_key import LOOPBACK, bearer_matches
from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.context import RequestContext, access_line
from trtserve.serve.errors import APIError
from trtserve.serve.state import ServerState
from trtserve.serve.telemetry.tracing import TRACE_HEADERS

access_log = logging.getLogger("trtserve.access")
log = logging.getLogger(__name__)
SERVICE = "/inference.GRPCInferenceService/"
STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
HEALTH = ("ServerLive", "ServerReady", "ModelReady")  # answered without a key, while loading and draining
# codes that mark a call's span as failed (OpenTelemetry's gRPC server conventions)
SERVER_FAULTS = (
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DATA_LOSS,
)


def status_of(err: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and message for an error raised while serving a call."""
    if isinstance(err, APIError):
        return STATUS.get(err.status, grpc.StatusCode.INTERNAL), err.message
    if isinstance(err, UserError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(err)
    log.error("unhandled error in a gRPC call", exc_info=err)
    return grpc.StatusCode.INTERNAL, f"internal error ({type(err).__name__}); this is a bug in trtserve"


def gone_code(context) -> grpc.StatusCode:
    """Why a call was cancelled under us: its deadline passed, or the client left."""
    remaining = context.time_remaining()
    return grpc.StatusCode.DEADLINE_EXCEEDED if remaining is not None and remaining <= 0 else grpc.StatusCode.CANCELLED


def unknown_model(name: str, version: str, served: str) -> APIError:
    """Triton's message (clients match on it), then what is served here."""
    which = f"'{name}'" + (f" version {version}" if version else "")
    return APIError(404, f"Request for unknown model: {which} is not found (this server serves {served})")


def check_id(rid: str) -> None:
    """Client ids are only echoed and logged (any characters, repeats fine), but bounded like HTTP's."""
    if len(rid) > MAX_CLIENT_ID:
        raise APIError(400, f"id is longer than {MAX_CLIENT_ID} characters; send a shorter id")


class CallLog:
    """One access-log line and one `trtserve_grpc_requests` sample, written by `finish`; with `metadata`
    (the call's), a server span continuing its `traceparent` (health checks get none), ended by `finish`."""

    def __init__(self, server: ServerState, method: str, rid: str, metadata: dict[str, str] | None = None):
        self.server, self.method, self.rid = server, method, rid
        self.context = RequestContext(
            frontend="kserve"
        )  # the routed version, then tokens and ttft: filled by GenerationRun
        if metadata is not None and method not in HEALTH:
            self.context.span = server.tracing.server_span(
                SERVICE.strip("/") + "/" + method,
                {k: metadata[k] for k in TRACE_HEADERS if k in metadata},
                {"rpc.system": "grpc", "rpc.method": method, "trtserve.request_id": rid},
                "text_completion",
            )
        self.start = time.monotonic()

    def finish(self, code: grpc.StatusCode) -> None:
        metrics = self.server.metrics
        if metrics is not None:
            model, version = self.context.model or metrics.model, self.context.version or ""
            metrics.grpc.labels(model, version, self.method, code.name).inc()
        self.context.span.end(code.name, code not in SERVER_FAULTS)
        line = {
            "request_id": self.rid,
            "method": "GRPC",
            "path": SERVICE + self.method,
            "status": code.name,
            "duration_ms": round((time.monotonic() - self.start) * 1000, 1),
            **self.context.log_fields(),
        }
        access_log.info(access_line(line, self.server.config.access_log_format))


def admit(server: ServerState, method: str, metadata: dict[str, str]) -> None:
    """Raise APIError unless this call may go ahead (same rules and order as the HTTP middleware)."""
    if len(metadata.get("x-request-id", "")) > MAX_CLIENT_ID:
        raise APIError(400, f"x-request-id is longer than {MAX_CLIENT_ID} characters; send a shorter id")
    if method in HEALTH:
        return
    key = server.config.api_key
    admin = server.config.admin_key and method in ("RepositoryModelLoad", "RepositoryModelUnload")
    # Repository load / unload take the admin key instead (check_admin).
    if key and not admin and not bearer_matches(metadata.get("authorization", ""), key):
        raise APIError(401, "missing or wrong API key; send the metadata `authorization: Bearer <key>`")
    if server.draining:
        raise APIError(503, "the server is shutting down; retry on another replica")
    if server.load_error and not method.startswith("Repository"):
        raise APIError(503, f"loading the model failed ({server.load_error}); fix it and restart the server")
    if not server.loaded and not method.startswith("Repository"):
        raise APIError(503, "the model is still loading; retry when ServerReady says ready")


def check_admin(server: ServerState, metadata: dict[str, str], peer: str) -> None:
    """Repository load / unload take the admin key when the server has one (the API key is not enough);
    without one they are open to loopback clients only, the rule of the HTTP admin routes
    (serve/admin_key.py). peer: gRPC's `context.peer()`, e.g. "ipv4:127.0.0.1:5123" or "ipv6:[::1]:5123"."""
    key = server.config.admin_key
    if key and not bearer_matches(metadata.get("authorization", ""), key):
        raise APIError(401, "missing or wrong admin key; send the metadata `authorization: Bearer <admin key>`")
    host = peer.split(":", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if not key and host not in LOOPBACK:
        raise APIError(
            403, "repository load/unload is open only to localhost unless the server has --admin-key; set one"
        )


def metadata_of(context) -> dict[str, str]:
    return {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def unary(method):
    """Wrap a unary RPC `method(self, request, context, call: CallLog)`: admit it, map errors to
    status codes, and log it once however it ends."""

    @functools.wraps(method)
    async def handler(self, request, context):
        metadata = metadata_of(context)
        call = CallLog(self.server, method.__name__, metadata.get("x-request-id") or uuid.uuid4().hex, metadata)
        if trace := call.context.span.response_headers():  # x-trace-id, traceresponse
            context.set_trailing_metadata(tuple(trace))
        code = grpc.StatusCode.OK
        try:
            admit(self.server, method.__name__, metadata)
            return await method(self, request, context, call)
        except asyncio.CancelledError:
            code = gone_code(context)
            raise
        except Exception as err:
            code, message = status_of(err)
            await context.abort(code, message)
        finally:
            call.finish(code)

    return handler
