"""The `files` table and the files beside it (sync; call through `store.call` from asyncio)."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterable

from trtserve.state import StateStore

PREFIX = "file-"


def new_id() -> str:
    return PREFIX + uuid.uuid4().hex[:24]


def add(store: StateStore, file_id: str, filename: str, purpose: str, chunks: Iterable[bytes]) -> sqlite3.Row:
    """Write the bytes durably, then record them (a crash in between leaves an orphan the
    start-up sweep removes, never a row without its bytes)."""
    size = store.write_file(file_id, chunks)
    with store.transaction() as c:
        seq = c.execute("SELECT coalesce(max(seq), 0) + 1 FROM files").fetchone()[0]
        c.execute(
            "INSERT OR REPLACE INTO files (id, seq, filename, purpose, bytes, created_at, path) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (file_id, seq, filename, purpose, size, int(time.time()), file_id),
        )
    return get(store, file_id)


def get(store: StateStore, file_id: str) -> sqlite3.Row | None:
    return store.query_one("SELECT * FROM files WHERE id = ?", (file_id,))


def listing(store: StateStore, purpose: str | None, after: str | None, limit: int, order: str) -> list[sqlite3.Row]:
    """limit+1 rows (the extra one says has_more), newest first unless order == "asc"."""
    cmp, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
    where, args = [], []
    if purpose:
        where.append("purpose = ?")
        args.append(purpose)
    if after:
        where.append(f"seq {cmp} coalesce((SELECT seq FROM files WHERE id = ?), seq)")
        args.append(after)
    sql = "SELECT * FROM files" + (" WHERE " + " AND ".join(where) if where else "")
    return store.query(f"{sql} ORDER BY seq {direction} LIMIT ?", (*args, limit + 1))


def read(store: StateStore, file_id: str) -> bytes:
    return store.file_path(file_id).read_bytes()


def user_of(store: StateStore, file_id: str) -> str | None:
    """The active batch that reads this file, if any (it must not be deleted under it)."""
    row = store.query_one(
        "SELECT id FROM batches WHERE input_file_id = ? AND status IN ('validating', 'in_progress', 'finalizing', 'cancelling')",
        (file_id,),
    )
    return row["id"] if row else None


def delete(store: StateStore, file_id: str) -> bool:
    """Row first (committed), then the bytes: a crash in between leaves only an orphan."""
    gone = store.execute("DELETE FROM files WHERE id = ?", (file_id,)) > 0
    if gone:
        store.remove_file(file_id)
    return gone


def sweep(store: StateStore) -> int:
    """At start-up: remove files no row refers to (interrupted uploads and finalizations)."""
    keep = {r["path"] for r in store.query("SELECT path FROM files")}
    return store.sweep_files(keep, prefix=PREFIX)
