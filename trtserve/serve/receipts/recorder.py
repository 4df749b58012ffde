"""Commits receipts to the state store from a thread of its own, in batches.

The response path only queues (receipt id, the finished run): building the receipt (copies,
sha256s, JSON) and the fsync'd commit happen here, many receipts to one transaction, so the
cost a request pays for its receipt is a queue put. A receipt queued but not yet committed is
still returned by `get`; `close()` commits everything queued before it returns.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable

from trtserve.serve.receipts.model import Receipt

log = logging.getLogger(__name__)
MAX_BATCH = 256  # receipts per transaction
_STOP = object()

INSERT = "INSERT OR REPLACE INTO receipts (id, created_at, model, fingerprint, body) VALUES (?, ?, ?, ?, ?)"


class ReceiptRecorder:
    """store: a trtserve.state.StateStore whose schema has the `receipts` table."""

    def __init__(self, store):
        self.store = store
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: dict[str, Callable[[], Receipt]] = {}  # queued, not yet committed: id -> builder
        self._lock = threading.Lock()
        self.committed = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="trtserve-receipts", daemon=True)
        self._thread.start()

    def record(self, receipt_id: str, build: Callable[[], Receipt]) -> None:
        """Queue a receipt; `build()` makes it in the recorder's thread."""
        with self._lock:
            self._pending[receipt_id] = build
        self._queue.put((receipt_id, build))

    def get(self, receipt_id: str) -> dict | None:
        """The stored receipt as JSON data (blocking read: call it off the event loop)."""
        with self._lock:
            build = self._pending.get(receipt_id)
        if build is not None:
            return build().model_dump(mode="json")
        row = self.store.query_one("SELECT body FROM receipts WHERE id = ?", (receipt_id,))
        return None if row is None else json.loads(row["body"])

    def close(self, timeout: float = 30.0) -> None:
        """Commit everything queued so far, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)

    # ---- the recorder's thread ------------------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:  # whatever queued while the previous batch committed
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _STOP in batch:
                stop = True
                batch = [b for b in batch if b is not _STOP]
            if batch:
                self._commit(batch)

    def _commit(self, batch: list[tuple[str, Callable[[], Receipt]]]) -> None:
        rows = []
        for receipt_id, build in batch:
            try:
                r = build()
            except Exception:  # a bug in building one receipt must not lose the others
                log.exception("building receipt %s failed", receipt_id)
                self.failed += 1
                continue
            rows.append((r.id, r.created_at, r.model, r.engine.fingerprint, r.model_dump_json()))
        try:
            with self.store.transaction() as conn:
                conn.executemany(INSERT, rows)
            self.committed += len(rows)
        except Exception:  # disk full, store closed: the server keeps serving, the log says so
            log.exception("committing %d receipts failed", len(rows))
            self.failed += len(rows)
        with self._lock:
            for receipt_id, _ in batch:
                self._pending.pop(receipt_id, None)
