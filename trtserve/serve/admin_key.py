"""The admin key: what guards the routes that change what is served or read what others sent (the
model repository's load/unload/promote/..., LoRA adapter load/unload, receipts, replay, cache invalidation).

`Authorization: Bearer ADMIN_KEY` when the server has --admin-key; otherwise these routes are open to
clients on the loopback interface only. The API key never opens them (the middleware skips its own
API-key check for them: serve/repository/admin.py `is_admin_path`)."""

from __future__ import annotations

import hmac

from fastapi import Request

from trtserve.serve.errors import APIError

RECEIPT_PATHS = ("/v1/receipts/", "/v1/cache/", "/v1/replay")
ADAPTER_PATHS = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")  # serve/adapters.py
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def bearer_matches(authorization: str, key: str) -> bool:
    """Whether an `Authorization` header (or gRPC metadata) value is `Bearer KEY`, in constant time."""
    token = authorization[7:] if authorization.lower().startswith("bearer ") else ""
    return hmac.compare_digest(token.encode(), key.encode())


def require_admin(request: Request) -> None:
    """401 for a missing or wrong admin key; 403 from a non-loopback client when no key is set."""
    key = request.app.state.server.config.admin_key
    if key:
        if not bearer_matches(request.headers.get("authorization", ""), key):
            raise APIError(401, "missing or wrong admin key; send `Authorization: Bearer <admin key>`")
    elif request.client is None or request.client.host not in LOOPBACK:
        raise APIError(403, "admin routes are open only to localhost unless the server has --admin-key; set one")
