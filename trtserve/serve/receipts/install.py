"""Wiring receipts into the app: the admin routes, and a `Receipts` feature that observes every
generation service the app builds: each run gets a drawn seed when it has none (so it can be
replayed), and with --receipts on|hashes each client run's receipt goes to a recorder over the
state store."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from trtserve.engine.errors import UserError
from trtserve.serve.generation import GenerationService
from trtserve.serve.receipts.book import ReceiptBook, engine_identity
from trtserve.serve.receipts.recorder import ReceiptRecorder
from trtserve.serve.receipts.routes import router

log = logging.getLogger(__name__)


class Receipts:
    def __init__(self, mode: str, recorder: ReceiptRecorder | None):
        self.mode = mode  # off (ids and seeds only) | on | hashes
        self.recorder = recorder  # None with receipts off

    def attach(self, service: GenerationService) -> None:
        """Observe `service` (the app calls this for each one it builds, before it serves)."""
        book = ReceiptBook(engine_identity(service.engine.info), self.mode)
        service.param_hooks.append(book.prepare)
        recorder = self.recorder
        if recorder is not None:
            service.observers.append(lambda run, ok: book.finish(run, ok, recorder))

    def close(self) -> None:
        """Commit every queued receipt (blocking: call it in a thread)."""
        if self.recorder is not None:
            self.recorder.close()


def install_receipts(app: FastAPI, server) -> Receipts:
    """Call once the state store is open (server.store); `close_receipts` before it closes."""
    app.include_router(router)
    mode = server.config.receipts
    if mode != "off" and server.store is None:
        raise UserError(
            f"--receipts {mode} stores receipts in the state dir, but this server has none; "
            "give --state-dir DIR (not `none`), or leave receipts off"
        )
    receipts = Receipts(mode, ReceiptRecorder(server.store) if mode != "off" else None)
    app.state.receipts = receipts
    if mode != "off":
        log.info("receipts: %s, stored in %s", mode, server.store.path)
    return receipts


def close_receipts(app: FastAPI) -> None:
    """Commit every queued receipt (blocking: call it in a thread)."""
    app.state.receipts.close()
