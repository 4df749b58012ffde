"""One HTTP request carried from the prefix frontend to a replica over a Ray Serve handle, and the
in-process ASGI call that serves it there (the replica's own FastAPI app: same routes, auth, limits)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class HTTPCall:
    method: str
    path: str
    query: bytes  # the raw query string
    headers: list[tuple[bytes, bytes]]  # as ASGI carries them
    body: bytes
    prefix_key: int | None = None  # affinity.prefix_key of the prompt; read by router.PrefixAffinityRouter


@dataclass
class ResponseStart:
    status: int
    headers: list[tuple[bytes, bytes]]


async def call_asgi(app, call: HTTPCall) -> AsyncIterator[ResponseStart | bytes]:
    """Run `call` through `app`; yield its ResponseStart, then body chunks as the app sends them.
    Closing the iterator early (the client went away) tells the app the client disconnected and
    cancels it, which aborts the request in the engine."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": call.path,
        "raw_path": call.path.encode(),
        "query_string": call.query,
        "root_path": "",
        "headers": call.headers,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }
    sent: asyncio.Queue = asyncio.Queue()
    gone = asyncio.Event()
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        await sent.put(message)

    async def run():
        try:
            await app(scope, receive, send)
        finally:
            await sent.put(None)

    task = asyncio.ensure_future(run())
    try:
        while (message := await sent.get()) is not None:
            if message["type"] == "http.response.start":
                yield ResponseStart(message["status"], list(message.get("headers", [])))
            elif message["type"] == "http.response.body" and message.get("body"):
                yield message["body"]
        await task  # re-raise what the app raised (FastAPI answers errors itself, so this is our bug)
    finally:
        gone.set()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
