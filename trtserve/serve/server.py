"""Running the app under uvicorn, with a graceful drain on SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

import uvicorn

from trtserve.engine.errors import UserError
from trtserve.serve.app import create_app
from trtserve.serve.config import ServeConfig
from trtserve.serve.state import ServerState
from trtserve.serve.watchdog import EXIT_ENGINE_DEAD, Watchdog

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    """On SIGTERM: readiness false and new requests 503 at once; exit when in-flight requests
    finish or the drain deadline passes. A second signal exits immediately.
    Every tick also runs the engine watchdog (serve/watchdog.py): a dead engine ends the process
    with exit_code EXIT_ENGINE_DEAD."""

    def __init__(self, config: uvicorn.Config, server: ServerState, drain_timeout: float):
        super().__init__(config)
        self.server = server
        self.drain_timeout = drain_timeout
        self.drain_deadline: float | None = None
        self.watchdog = Watchdog(server)
        self.exit_code = 0

    def handle_exit(self, sig, frame) -> None:
        if sig == signal.SIGTERM and self.drain_deadline is None:
            log.info("SIGTERM: draining for up to %.0f s", self.drain_timeout)
            self.server.draining = True
            self.drain_deadline = time.monotonic() + self.drain_timeout
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        draining = self.drain_deadline is not None and not self.should_exit
        if draining and (self.server.in_flight == 0 or time.monotonic() > self.drain_deadline):
            self.should_exit = True
        if self.watchdog.tick() and not self.should_exit:
            self.exit_code = EXIT_ENGINE_DEAD
            self.should_exit = True
            _exit_anyway(EXIT_ENGINE_DEAD, after=30.0)
        return await super().on_tick(counter)


def check_grpc(config: ServeConfig) -> None:
    """Refuse --grpc-port now, in one sentence, if the extra is missing or the port is taken."""
    port = config.grpc_port
    if port is None:
        return
    try:
        import grpc  # noqa: F401
        import tritonclient.grpc  # noqa: F401
    except ImportError as err:
        raise UserError(f"--grpc-port needs grpcio and tritonclient ({err}); pip install 'trtserve[grpc]'") from None
    if port != 0 and port == config.port:
        raise UserError(f"--grpc-port {port} is also the HTTP port; give gRPC a port of its own")
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds: TIME_WAIT is no conflict
        try:
            s.bind((config.host, port))
        except OSError as err:
            raise UserError(
                f"cannot listen for gRPC on {config.host}:{port} ({err.strerror}); choose another --grpc-port"
            ) from None


def serve(engine_dir: Path, config: ServeConfig) -> None:
    check_grpc(config)
    app = create_app(engine_dir, config)
    uv = uvicorn.Config(
        app, host=config.host, port=config.port, log_level="info", timeout_graceful_shutdown=1, access_log=False
    )
    server = DrainingServer(uv, app.state.server, config.drain_timeout)
    server.run()
    if server.exit_code:
        raise SystemExit(server.exit_code)


def _exit_anyway(code: int, after: float) -> None:
    """If an orderly shutdown hangs (a wedged engine thread), end the process regardless."""
    timer = threading.Timer(after, os._exit, (code,))
    timer.daemon = True
    timer.start()
