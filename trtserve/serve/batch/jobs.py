"""The `batches` and `batch_results` tables (sync; call through `store.call` from asyncio).
Every state change is one committed transaction."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid

from trtserve.state import StateStore


def new_id() -> str:
    return "batch_" + uuid.uuid4().hex[:24]


def create(store: StateStore, body, window_s: int) -> sqlite3.Row:
    now = int(time.time())
    batch_id = new_id()
    with store.transaction() as c:
        seq = c.execute("SELECT coalesce(max(seq), 0) + 1 FROM batches").fetchone()[0]
        c.execute(
            "INSERT INTO batches (id, seq, endpoint, input_file_id, completion_window, status, created_at, expires_at,"
            " metadata) VALUES (?, ?, ?, ?, ?, 'validating', ?, ?, ?)",
            (
                batch_id,
                seq,
                body.endpoint,
                body.input_file_id,
                body.completion_window,
                now,
                now + window_s,
                json.dumps(body.metadata) if body.metadata else None,
            ),
        )
    return get(store, batch_id)


def get(store: StateStore, batch_id: str) -> sqlite3.Row | None:
    return store.query_one("SELECT * FROM batches WHERE id = ?", (batch_id,))


def listing(store: StateStore, after: str | None, limit: int) -> list[sqlite3.Row]:
    """Newest first, limit+1 rows (the extra one says has_more)."""
    if after:
        return store.query(
            "SELECT * FROM batches WHERE seq < coalesce((SELECT seq FROM batches WHERE id = ?), 0)"
            " ORDER BY seq DESC LIMIT ?",
            (after, limit + 1),
        )
    return store.query("SELECT * FROM batches ORDER BY seq DESC LIMIT ?", (limit + 1,))


def active(store: StateStore) -> list[sqlite3.Row]:
    return store.query(
        "SELECT * FROM batches WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling') ORDER BY seq"
    )


def set_status(store: StateStore, batch_id: str, status: str, only_from: tuple[str, ...], **fields) -> bool:
    """Move to `status` (stamping `<status>_at`) if the batch is in one of `only_from`."""
    stamp = {f"{status}_at": int(time.time())} if status != "in_progress" else {"in_progress_at": int(time.time())}
    values = {**stamp, **fields, "status": status}
    sets = ", ".join(f"{k} = ?" for k in values)
    marks = ", ".join("?" for _ in only_from)
    n = store.execute(
        f"UPDATE batches SET {sets} WHERE id = ? AND status IN ({marks})", (*values.values(), batch_id, *only_from)
    )
    return n > 0


def done_lines(store: StateStore, batch_id: str) -> set[int]:
    return {r[0] for r in store.query("SELECT line FROM batch_results WHERE batch_id = ?", (batch_id,))}


def record(store: StateStore, batch_id: str, line: int, ok: bool, result: dict) -> bool:
    """Commit one finished line and its count together; a line already recorded is ignored
    (the primary key), so no line is ever counted or written twice."""
    with store.transaction() as c:
        n = c.execute(
            "INSERT OR IGNORE INTO batch_results (batch_id, line, ok, record) VALUES (?, ?, ?, ?)",
            (batch_id, line, int(ok), json.dumps(result)),
        ).rowcount
        if n:
            column = "completed" if ok else "failed"
            c.execute(f"UPDATE batches SET {column} = {column} + 1 WHERE id = ?", (batch_id,))
    return n > 0


def results(store: StateStore, batch_id: str, ok: bool) -> list[str]:
    rows = store.query(
        "SELECT record FROM batch_results WHERE batch_id = ? AND ok = ? ORDER BY line", (batch_id, int(ok))
    )
    return [r[0] for r in rows]


def finish(store: StateStore, batch_id: str, status: str, output_id: str | None, error_id: str | None) -> None:
    """The final state and its files, in one transaction (the files' rows are already committed)."""
    now = int(time.time())
    store.execute(
        f"UPDATE batches SET status = ?, {status}_at = ?, output_file_id = ?, error_file_id = ? WHERE id = ?",
        (status, now, output_id, error_id, batch_id),
    )
