"""StateStore: one SQLite database in WAL mode plus a files dir, safe to use from many threads
and from asyncio (through one worker thread), surviving `kill -9` with nothing half-written.

Durability: `synchronous=FULL`, so a transaction that returned from COMMIT is on disk; callers
commit before they tell a client something happened. A process killed mid-transaction leaves
only the WAL frames of uncommitted work, which SQLite discards when the file is next opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from trtserve.engine.errors import UserError
from trtserve.state.schema import MIGRATIONS, Migration

log = logging.getLogger(__name__)
T = TypeVar("T")
DB_NAME = "state.sqlite3"
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class StateDirBusy(UserError):
    """Another live process holds the state dir (two servers must not share one)."""


class StateStore:
    """Open with `StateStore(root)`; `close()` when done. Every method is thread-safe: each thread
    gets its own connection; `await store.call(fn, ...)` runs `fn` on the store's worker thread so
    the event loop never blocks on disk."""

    def __init__(self, root: Path, migrations: list[Migration] | None = None, busy_timeout: float = 10.0):
        self.root = Path(root)
        self.files_dir = self.root / "files"
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.root / DB_NAME
        self.busy_timeout = busy_timeout
        self._lock_fd = _lock(self.root)
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="trtserve-state")
        try:
            self.applied = self._migrate(MIGRATIONS if migrations is None else migrations)
        except BaseException:
            self.close()
            raise

    # ---- connections and transactions --------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit: every statement outside `transaction()` commits)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE (takes the write lock at once, so two writers never deadlock on
        upgrade) ... COMMIT; ROLLBACK if the block raises. Not re-entrant."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def query(self, sql: str, params: Iterable[Any] | dict = ()) -> list[sqlite3.Row]:
        return self.connection().execute(sql, params).fetchall()

    def query_one(self, sql: str, params: Iterable[Any] | dict = ()) -> sqlite3.Row | None:
        return self.connection().execute(sql, params).fetchone()

    def execute(self, sql: str, params: Iterable[Any] | dict = ()) -> int:
        """One statement, committed when it returns; -> rows changed."""
        return self.connection().execute(sql, params).rowcount

    async def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Run fn(*args, **kwargs) on the store's single worker thread (writes from the event loop
        are serialised there, so they never wait on each other's locks)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, functools.partial(fn, *args, **kwargs))

    # ---- files beside the database -----------------------------------------------------------
    def file_path(self, name: str) -> Path:
        if not _NAME.match(name) or name.startswith("."):
            raise ValueError(f"bad state file name {name!r}")
        return self.files_dir / name

    def write_file(self, name: str, chunks: Iterable[bytes]) -> int:
        """Write atomically and durably (temp file, fsync, rename, fsync dir) -> bytes written.
        Record the file in the database only after this returns."""
        dest = self.file_path(name)
        tmp = self.files_dir / f".{name}.tmp"
        size = 0
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
        _fsync_dir(self.files_dir)
        return size

    def remove_file(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.file_path(name).unlink()

    def sweep_files(self, keep: set[str], prefix: str = "") -> int:
        """Delete files named PREFIX... (and temp files of their interrupted writes) that are not
        in `keep` -> how many. Each owner sweeps only its own prefix."""
        gone = 0
        for p in self.files_dir.iterdir():
            if p.is_file() and p.name not in keep and p.name.removeprefix(".").startswith(prefix):
                p.unlink()
                gone += 1
        return gone

    def close(self) -> None:
        self._worker.shutdown(wait=True)
        with self._conns_lock:
            for conn in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ---- schema ------------------------------------------------------------------------------
    def _migrate(self, migrations: list[Migration]) -> list[str]:
        """Apply, in list order, each migration this database has not recorded; -> all applied."""
        conn = self.connection()
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        done = {r["name"] for r in conn.execute("SELECT name FROM schema_migrations")}
        known = {m.name for m in migrations}
        if unknown := sorted(done - known):
            raise UserError(
                f"the state dir {self.root} was written by a newer trtserve (migrations {', '.join(unknown)}); "
                "upgrade trtserve or pass another --state-dir"
            )
        for m in migrations:
            if m.name in done:
                continue
            if not _NAME.match(m.name):
                raise ValueError(f"bad migration name {m.name!r}")
            log.info("state store %s: applying migration %s", self.path, m.name)
            # One script, one transaction: the tables and the record that they exist commit together.
            script = f"BEGIN IMMEDIATE;\n{m.sql}\n;INSERT INTO schema_migrations VALUES ('{m.name}', {time.time()});\nCOMMIT;"
            try:
                conn.executescript(script)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            done.add(m.name)
        conn.execute(f"PRAGMA user_version={len(done)}")
        return [m.name for m in migrations]


def _lock(root: Path) -> int:
    """An exclusive flock on ROOT/lock for the store's lifetime (released by the OS on kill -9)."""
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StateDirBusy(
            f"the state dir {root} is in use by another trtserve process (pid {holder}); "
            "pass another --state-dir, or --state-dir none"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
