"""The app in this process, loaded and warmed once per module, for schemathesis and the edge cases.

schemathesis starts an ASGI app's lifespan itself and ends it after every test; the engine would
then load once per operation. So the fixture runs the real lifespan in a thread of its own until
the module ends, and hands schemathesis the app behind a shim that answers lifespan messages.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest


class _Started:
    """The app, its lifespan already running elsewhere: lifespan messages are acknowledged only."""

    def __init__(self, app):
        self.app = app
        self.state = app.state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[1]  # startup | shutdown
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return


def _run_lifespan(app, ready: threading.Event, stop: threading.Event, errors: list) -> None:
    async def main():
        async with app.router.lifespan_context(app):
            deadline = time.monotonic() + 120
            while not app.state.server.is_ready and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    try:
        asyncio.run(main())
    except BaseException as err:  # noqa: BLE001 - reported by the fixture
        errors.append(err)
        ready.set()


@pytest.fixture(scope="module")
def fuzz_app(tiny_llama_engine, tmp_path_factory):
    from trtserve.engine.run_config import RuntimeConfig
    from trtserve.serve.app import create_app
    from trtserve.serve.config import ServeConfig

    config = ServeConfig(
        state_dir=str(tmp_path_factory.mktemp("state")),
        request_timeout=30,
        max_queued_requests=64,
        engine=RuntimeConfig(kv_cache_memory=32 << 20),
    )
    app = create_app(tiny_llama_engine, config)
    ready, stop, errors = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=_run_lifespan, args=(app, ready, stop, errors), daemon=True)
    thread.start()
    ready.wait(150)
    assert not errors and app.state.server.is_ready, f"the app did not become ready: {errors}"
    yield _Started(app)
    stop.set()
    thread.join(30)


@pytest.fixture(scope="session")
def model_name(tiny_llama_engine) -> str:
    return tiny_llama_engine.name
