"""Idempotency-Key (IETF httpapi draft) on every POST that starts work, as pure ASGI middleware.

The first request with a key runs; its final response (status, content headers, body; errors
too, streamed events too) is committed to the state store with a fingerprint of the request
before its last byte goes to the client. Then, within the key's lifetime (idempotency_ttl):
  same key, same request      -> the stored response replayed (`Idempotent-Replayed: true`),
                                 the engine untouched
  same key, different request -> 422
  same key while the first runs -> 409, or with `Prefer: wait` the stored response once it ends
Keys are scoped by the caller's API key. 429 and 503 (refused before any work) are not stored,
nor is a response that never finished (client gone, server killed): a retry then runs anew.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time

from trtserve.serve.errors import APIError, error_body
from trtserve.serve.state import ServerState
from trtserve.state import StateStore

PATHS = re.compile(
    r"^(/v1/completions|/v1/chat/completions|/v1/responses|/v1/batches"
    r"|/v2/models/[^/]+(/versions/[^/]+)?/(infer|generate|generate_stream))$"
)
KEEP_HEADERS = {"content-type", "cache-control", "retry-after", "inference-header-content-length"}
TRANSIENT = {429, 503}  # refusals that did no work: a retry should run
MAX_KEY = 255
POLL_S = 0.05


class IdempotencyMiddleware:
    def __init__(self, app, server: ServerState):
        self.app, self.server = app, server

    async def __call__(self, scope, receive, send):
        store = self.server.store
        if scope["type"] != "http" or scope["method"] != "POST" or store is None or not PATHS.match(scope["path"]):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        key = headers.get("idempotency-key")
        if key is None:
            return await self.app(scope, receive, send)
        path = scope["path"]
        if not 0 < len(key) <= MAX_KEY:
            return await _send_error(send, path, 400, f"Idempotency-Key must have 1 to {MAX_KEY} characters")
        try:
            body = await _read_body(receive)
        except APIError as err:  # the body limit (raised by ServerMiddleware's receive)
            return await _send_error(send, path, err.status, err.message)
        who = hashlib.sha256(headers.get("authorization", "").encode()).hexdigest()[:32]
        fingerprint = hashlib.sha256(b"\0".join([path.encode(), scope.get("query_string", b""), body])).hexdigest()
        ttl = self.server.config.idempotency_ttl
        wait = _prefer_wait(headers.get("prefer", ""), self.server.config.request_timeout)
        deadline = time.monotonic() + wait
        while True:
            verdict, row = await store.call(claim, store, who, key, fingerprint, ttl)
            if verdict == "mismatch":
                message = "this Idempotency-Key was used with a different request; send a new key for a new request"
                return await _send_error(send, path, 422, message)
            if verdict == "done":
                return await _replay(send, row)
            if verdict == "new":
                break
            if time.monotonic() >= deadline:
                message = "a request with this Idempotency-Key is still running; retry later, or send `Prefer: wait`"
                return await _send_error(send, path, 409, message, {"Retry-After": "1"})
            await asyncio.sleep(POLL_S)
        await self._run_first(scope, body, receive, send, store, who, key)

    async def _run_first(self, scope, body: bytes, receive, send, store: StateStore, who: str, key: str) -> None:
        """Run the request, storing its response before the final body message is sent."""
        start: dict = {}
        chunks: list[bytes] = []
        stored = False

        async def capture(message):
            nonlocal stored
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False) and start.get("status") not in TRANSIENT:
                    kept = [
                        [k.decode("latin-1"), v.decode("latin-1")]
                        for k, v in start.get("headers", [])
                        if k.decode("latin-1").lower() in KEEP_HEADERS
                    ]
                    await store.call(complete, store, who, key, start["status"], kept, b"".join(chunks))
                    stored = True
            await send(message)

        try:
            await self.app(scope, _replaying(body, receive), capture)
        finally:
            if not stored:
                await asyncio.shield(store.call(release, store, who, key))


# ---- the store side (sync: run through store.call) -------------------------------------------
def claim(store: StateStore, who: str, key: str, fingerprint: str, ttl: float):
    """-> ("new", None) having recorded the key as running, or (state | "mismatch", row)."""
    now = time.time()
    with store.transaction() as c:
        c.execute("DELETE FROM idempotency WHERE expires_at < ?", (now,))
        row = c.execute("SELECT * FROM idempotency WHERE scope = ? AND key = ?", (who, key)).fetchone()
        if row is None:
            c.execute(
                "INSERT INTO idempotency (scope, key, fingerprint, state, created_at, expires_at)"
                " VALUES (?, ?, ?, 'running', ?, ?)",
                (who, key, fingerprint, now, now + ttl),
            )
            return "new", None
    return ("mismatch" if row["fingerprint"] != fingerprint else row["state"]), row


def complete(store: StateStore, who: str, key: str, status: int, headers: list, body: bytes) -> None:
    store.execute(
        "UPDATE idempotency SET state = 'done', status = ?, headers = ?, body = ? WHERE scope = ? AND key = ?",
        (status, json.dumps(headers), body, who, key),
    )


def release(store: StateStore, who: str, key: str) -> None:
    store.execute("DELETE FROM idempotency WHERE scope = ? AND key = ? AND state = 'running'", (who, key))


def forget_running(store: StateStore) -> int:
    """At start-up: keys whose first request died with the previous process can be retried."""
    return store.execute("DELETE FROM idempotency WHERE state = 'running'")


# ---- ASGI helpers ----------------------------------------------------------------------------
async def _read_body(receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _replaying(body: bytes, receive):
    """The body once, then the real receive (which reports the client's disconnect)."""
    sent = False

    async def wrapped():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


def _prefer_wait(prefer: str, default: float | None) -> float:
    """Seconds to wait for a running first request: 0 unless `Prefer: wait` (or `wait=N`)."""
    for token in prefer.lower().replace(" ", "").split(","):
        if token == "wait":
            return default or 600.0
        if token.startswith("wait="):
            try:
                return max(0.0, float(token[5:]))
            except ValueError:
                return 0.0
    return 0.0


async def _replay(send, row) -> None:
    body = bytes(row["body"] or b"")
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in json.loads(row["headers"] or "[]")]
    headers += [(b"content-length", str(len(body)).encode()), (b"idempotent-replayed", b"true")]
    await send({"type": "http.response.start", "status": row["status"], "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, path: str, status: int, message: str, extra: dict | None = None) -> None:
    body = json.dumps(error_body(path, status, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
