"""The admin key of the receipts and cache routes: the same rule as the repository's admin routes
(serve/repository/admin.py): `Authorization: Bearer ADMIN_KEY` when the server has --admin-key,
otherwise open to clients on the loopback interface only. The API key does not open them."""

from __future__ import annotations

import hmac

from fastapi import Request

from trtserve.serve.errors import APIError

ADMIN_PATHS = ("/v1/receipts/", "/v1/cache/", "/v1/replay")  # the middleware skips its API-key check
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def require_admin(request: Request) -> None:
    key = request.app.state.server.config.admin_key
    if key:
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(token.encode(), key.encode()):
            raise APIError(401, "missing or wrong admin key; send `Authorization: Bearer <admin key>`")
    elif request.client is None or request.client.host not in LOOPBACK:
        raise APIError(403, "admin routes are open only to localhost unless the server has --admin-key; set one")
