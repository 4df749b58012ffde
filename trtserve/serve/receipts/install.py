"""Wiring receipts into the app: the admin routes, and with --receipts on|hashes a recorder over the
state store that every finished run (the repository's observers) is handed to."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from trtserve.engine.errors import UserError
from trtserve.serve.receipts.recorder import ReceiptRecorder
from trtserve.serve.receipts.routes import router

log = logging.getLogger(__name__)


def install_receipts(app: FastAPI, server) -> None:
    """Call once the state store is open (server.store); `close_receipts` before it closes."""
    app.include_router(router)
    app.state.receipts = None
    mode = server.config.receipts
    if mode == "off":
        return
    if server.store is None:
        raise UserError(
            f"--receipts {mode} stores receipts in the state dir, but this server has none; "
            "give --state-dir DIR (not `none`), or leave receipts off"
        )
    recorder = ReceiptRecorder(server.store)
    app.state.receipts = recorder

    def observe(_version, run, ok: bool) -> None:
        run.service.receipts.finish(run, ok, recorder)

    server.repository.observers.append(observe)
    log.info("receipts: %s, stored in %s", mode, server.store.path)


def close_receipts(app: FastAPI) -> None:
    """Commit every queued receipt (blocking: call it in a thread)."""
    recorder = getattr(app.state, "receipts", None)
    if recorder is not None:
        recorder.close()
