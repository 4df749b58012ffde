"""Opening the state store for a server and running the durable features' background work."""

from __future__ import annotations

import logging

from trtserve.engine.errors import UserError
from trtserve.serve.config import ServeConfig
from trtserve.state import StateDirBusy, StateStore, resolve_state_dir

log = logging.getLogger(__name__)


def open_store(config: ServeConfig, server_name: str) -> StateStore | None:
    """The store in --state-dir (None with `none`). An explicit dir that cannot be used is a
    UserError; the default dir, when another server holds it, only turns durable features off."""
    from trtserve.serve import idempotency
    from trtserve.serve.batch import files

    root = resolve_state_dir(config.state_dir, server_name)
    if root is None:
        return None
    try:
        store = StateStore(root)
    except StateDirBusy as err:
        if config.state_dir is not None:
            raise
        log.warning("%s; batches and Idempotency-Key are off for this server", err)
        return None
    except OSError as err:
        raise UserError(
            f"cannot use the state dir {root} ({err.strerror}); pass another --state-dir, or none"
        ) from None
    files.sweep(store)  # bytes of uploads and outputs a kill -9 left without their row
    idempotency.forget_running(store)  # requests the previous process was running died with it
    log.info("state store: %s", store.path)
    return store


def start(app, server) -> None:
    """In the lifespan: the batch runner (on `app.state.batch_runner`) when there is a store."""
    from trtserve.serve.batch.runner import BatchRunner

    app.state.batch_runner = None
    if server.store is not None:
        app.state.batch_runner = BatchRunner(server, server.store)
        app.state.batch_runner.start()


async def stop_runner(app) -> None:
    """Stop the batch runner: in-flight batch lines are aborted, uncommitted, and run again on the next start."""
    runner = getattr(app.state, "batch_runner", None)
    if runner is not None:
        await runner.stop()


def close_store(server) -> None:
    """Last: after every writer (the batch runner, receipts) has stopped."""
    if server.store is not None:
        server.store.close()
