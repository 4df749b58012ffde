"""HTTP errors: OpenAI-style bodies on /v1 (and the extras), KServe-style `{"error": msg}` on /v2."""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from trtserve.engine.errors import UserError

log = logging.getLogger(__name__)
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
    504: "timeout_error",
}


_WHY = {
    400: "The request is invalid; the message names the field and how to fix it.",
    401: "The API key is missing or wrong.",
    403: "An admin route from a client off the loopback interface, and the server has no admin key.",
    404: "No such model (or version).",
    409: "The request conflicts with the state it acts on; the message says which.",
    413: "The request body is larger than the server's limit.",
    429: "The queue is full; retry after Retry-After seconds.",
    501: "The model's backend cannot do what was asked.",
    503: "The model is loading, the server is draining, or the engine died; retry on another replica.",
    504: "The request's deadline passed before it finished.",
}


class OpenAIErrorDetail(BaseModel):
    message: str  # one sentence: what was wrong and how to fix it
    type: str  # e.g. invalid_request_error, rate_limit_error, service_unavailable
    param: str | None = None  # the request field at fault, when one is
    code: int  # the HTTP status


class OpenAIErrorBody(BaseModel):
    """Every non-2xx answer on /v1 and the extras."""

    error: OpenAIErrorDetail


class KServeErrorBody(BaseModel):
    """Every non-2xx answer on /v2 (KServe v2's `{"error": message}`)."""

    error: str


def error_responses(*statuses: int, kserve: bool = False, why: dict[int, str] | None = None) -> dict:
    """The OpenAPI `responses=` of a route: each error status it can return, with its body
    (`why`: the route's own reasons, where they differ from the common ones)."""
    # a $ref, not `"model": ...`: for a model FastAPI builds a validator per route and status at every
    # start, for the schema alone; serve/openapi.py puts both bodies in the components
    ref = "KServeErrorBody" if kserve else "OpenAIErrorBody"
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}
    return {s: {"description": (why or {}).get(s, _WHY[s]), "content": content} for s in statuses}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def error_body(path: str, status: int, message: str, param: str | None = None) -> dict:
    if path.startswith("/v2"):
        return {"error": message}
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param, "code": status}}


def error_response(
    path: str, status: int, message: str, param: str | None = None, headers: dict | None = None
) -> JSONResponse:
    return JSONResponse(error_body(path, status, message, param), status_code=status, headers=headers)


def describe_request_error(err: RequestValidationError) -> tuple[str, str | None]:
    """One sentence for the first problem, naming the field."""
    e = err.errors()[0]
    loc = [str(p) for p in e.get("loc", ()) if p not in ("body",)]
    field = ".".join(loc) or None
    msg = e.get("msg", "invalid value").removeprefix("Value error, ")  # our validators' sentences
    if e.get("type") == "extra_forbidden":
        msg = "unknown field"
    elif e.get("type") == "json_invalid":
        return "the request body is not valid JSON", None
    elif e.get("type") == "missing":
        msg = "field required"
    more = f" (and {len(err.errors()) - 1} more problems)" if len(err.errors()) > 1 else ""
    return (f"{field}: {msg}{more}" if field else f"{msg}{more}"), field


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """The methods some route takes on this request's path: each is asked whether it would match
    the same request with another method (FastAPI nests included routers as routes of their own)."""
    routes = request.app.router.routes
    return [m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]


def install_handlers(app) -> None:
    @app.exception_handler(APIError)
    async def _api(request: Request, err: APIError):
        return error_response(request.url.path, err.status, err.message, err.param, err.headers)

    @app.exception_handler(UserError)
    async def _user(request: Request, err: UserError):
        return error_response(request.url.path, 400, str(err))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, err: ClientDisconnect):
        # The client left while its body was being read (scripts/soak.py found this as a 500 with a
        # stack trace): nobody reads the answer; 499 keeps the access log and metrics honest.
        return error_response(request.url.path, 499, "the client disconnected before its request was read")

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, err: RequestValidationError):
        message, field = describe_request_error(err)
        return error_response(request.url.path, 400, message, field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException):
        headers = dict(err.headers or {})
        if err.status_code == 405:
            # RFC 9110: a 405 lists every method the path has; Starlette's own lists only the
            # first route that matched the path (GET and DELETE on one path are two routes).
            allowed = allowed_methods(request)
            headers["Allow"] = ", ".join(allowed)
            message = f"method {request.method} not allowed on {request.url.path}; use {' or '.join(allowed)}"
        elif err.status_code == 404:
            message = f"no route for {request.method} {request.url.path}"
        else:
            message = str(err.detail)
        return error_response(request.url.path, err.status_code, message, headers=headers or None)

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return error_response(
            request.url.path, 500, f"internal error ({type(err).__name__}); this is a bug in trtserve"
        )


def parse_body(model: type[BaseModel], raw: bytes):
    """A JSON body (empty: {}) as `model`; APIError 400 naming the first field that is wrong."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(x) for x in e["loc"]) or "body"
        raise APIError(400, f"{where}: {e['msg']}") from None
