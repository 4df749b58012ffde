"""Sleep and wake: `POST /admin/sleep` drains the server and has every loaded engine release its KV
cache (and, on a GPU, move its weights to host memory); `POST /admin/wake_up` restores them.

While asleep, readiness is false and every request but the admin routes, health and /metrics gets
503 with Retry-After (serve/middleware.py). Both take the admin key (serve/admin_key.py).
"""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from trtserve.engine.errors import UnsupportedError
from trtserve.serve.admin_key import require_admin
from trtserve.serve.errors import APIError, error_responses
from trtserve.serve.state import ServerState

log = logging.getLogger(__name__)
router = APIRouter()
DRAIN_POLL_S = 0.02
_RESPONSES = error_responses(
    401, 403, 501, why={501: "A loaded engine's backend cannot release its memory; the server stays awake."}
)


def _engines(server: ServerState) -> list:
    return [mv.engine for mv in server.repository.versions() if mv.engine is not None]  # type: ignore[union-attr]


@router.post("/admin/sleep", responses=_RESPONSES)
async def sleep(request: Request):
    """Refuse new requests, let those in flight finish (up to drain_timeout), then release the engines' memory."""
    require_admin(request)
    server: ServerState = request.app.state.server
    start, was = time.monotonic(), server.asleep
    server.asleep = True  # readiness false and new requests 503 from now on
    deadline = start + server.config.drain_timeout
    while server.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)
    slept = []
    try:
        for engine in _engines(server):
            await engine.sleep()  # lets what reached it finish first
            slept.append(engine)
    except UnsupportedError as err:
        for engine in slept:
            await engine.wake_up()
        server.asleep = was
        raise APIError(501, str(err)) from None
    log.info("asleep: %d engines released their memory in %.2f s", len(slept), time.monotonic() - start)
    return JSONResponse({"asleep": True, "seconds": round(time.monotonic() - start, 3)})


@router.post("/admin/wake_up", responses=_RESPONSES)
async def wake_up(request: Request):
    """Restore what /admin/sleep released; readiness true and requests served again."""
    require_admin(request)
    server: ServerState = request.app.state.server
    start = time.monotonic()
    for engine in _engines(server):
        await engine.wake_up()
    server.asleep = False
    log.info("awake in %.2f s", time.monotonic() - start)
    return JSONResponse({"asleep": False, "seconds": round(time.monotonic() - start, 3)})
