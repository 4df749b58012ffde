"""The state store (trtserve/state): migrations, transactions, threads, the dir lock, and a real
writer process killed with SIGKILL mid-transaction leaving nothing half-written."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from trtserve.engine.errors import UserError
from trtserve.state import StateDirBusy, StateStore, resolve_state_dir
from trtserve.state.schema import MIGRATIONS, Migration

pytestmark = pytest.mark.timeout(120)


def test_migrations_apply_once_in_order_and_appended_ones_apply_on_reopen(tmp_path):
    s = StateStore(tmp_path)
    assert s.applied == [m.name for m in MIGRATIONS]
    s.execute("INSERT INTO files VALUES ('file-1', 1, 'a.jsonl', 'batch', 3, 0, 'file-1')")
    s.close()
    extra = Migration("9999_receipts_test", "CREATE TABLE receipts_test (id TEXT PRIMARY KEY, n INTEGER);")
    s = StateStore(tmp_path, [*MIGRATIONS, extra])
    assert [r["name"] for r in s.query("SELECT name FROM schema_migrations ORDER BY rowid")] == s.applied
    assert s.query_one("SELECT count(*) AS n FROM files")["n"] == 1  # earlier data untouched
    s.execute("INSERT INTO receipts_test VALUES ('r', 1)")
    assert s.query_one("PRAGMA user_version")[0] == len(MIGRATIONS) + 1
    assert s.query_one("PRAGMA journal_mode")[0] == "wal"
    s.close()
    # A store written by a newer build (a migration this one does not know) is refused in one sentence.
    with pytest.raises(UserError, match="newer trtserve"):
        StateStore(tmp_path)


def test_a_failing_migration_leaves_nothing_behind(tmp_path):
    bad = Migration("9999_bad", "CREATE TABLE half (id INTEGER); INSERT INTO nowhere VALUES (1);")
    with pytest.raises(Exception, match="nowhere"):
        StateStore(tmp_path, [*MIGRATIONS, bad])
    s = StateStore(tmp_path)
    assert s.query_one("SELECT count(*) FROM sqlite_master WHERE name = 'half'")[0] == 0
    assert "9999_bad" not in {r["name"] for r in s.query("SELECT name FROM schema_migrations")}
    s.close()


def test_transaction_rolls_back_when_the_block_raises(tmp_path):
    s = StateStore(tmp_path)
    with pytest.raises(RuntimeError), s.transaction() as c:
        c.execute("INSERT INTO files VALUES ('file-1', 1, 'a', 'batch', 1, 0, 'file-1')")
        raise RuntimeError("boom")
    assert s.query_one("SELECT count(*) FROM files")[0] == 0
    s.close()


def test_threads_and_the_event_loop_write_concurrently_without_losing_a_row(tmp_path):
    s = StateStore(tmp_path)

    def writer(t: int):
        for i in range(25):
            with s.transaction() as c:
                n = c.execute("SELECT count(*) FROM files WHERE id NOT LIKE 'loop-%'").fetchone()[0]
                c.execute("INSERT INTO files VALUES (?, ?, 'x', 'batch', 0, 0, 'x')", (f"t{t}-{i}", n))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()

    async def from_loop():
        for i in range(25):
            await s.call(s.execute, "INSERT INTO files VALUES (?, 0, 'x', 'batch', 0, 0, 'x')", (f"loop-{i}",))

    asyncio.run(from_loop())
    for t in threads:
        t.join()
    assert s.query_one("SELECT count(*) FROM files")[0] == 6 * 25 + 25
    # BEGIN IMMEDIATE serialises the read-then-write: every seq a thread read was distinct.
    seqs = [r[0] for r in s.query("SELECT seq FROM files WHERE id NOT LIKE 'loop-%'")]
    assert sorted(seqs) == list(range(150))
    s.close()


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from trtserve.state import StateStore
    s = StateStore(Path(sys.argv[1]))
    with s.transaction() as c:
        for i in range(100):
            c.execute("INSERT INTO files VALUES (?, ?, 'committed', 'batch', 0, 0, 'x')", (f"ok-{i}", i))
    s.write_file("file-ok", [b"whole"])
    # A second transaction, big enough to spill pages into the WAL, that never commits.
    c = s.connection()
    c.execute("BEGIN IMMEDIATE")
    for i in range(20000):
        c.execute("INSERT INTO files VALUES (?, ?, ?, 'batch', 0, 0, 'x')", (f"half-{i}", i, "y" * 200))
    c.execute("UPDATE batches SET status = 'half'")
    # and a file write interrupted before its rename
    f = open(s.files_dir / ".file-half.tmp", "wb"); f.write(b"par"); f.flush()
    print("mid-transaction", flush=True)
    time.sleep(60)
    """
)


def test_a_writer_killed_mid_transaction_leaves_only_committed_work(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "mid-transaction"
        # While it lives, the dir is locked against a second server.
        with pytest.raises(StateDirBusy, match=str(proc.pid)):
            StateStore(tmp_path)
        assert (tmp_path / "state.sqlite3-wal").stat().st_size > 0  # uncommitted pages reached the WAL
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    s = StateStore(tmp_path)  # the lock died with the process
    assert s.query_one("PRAGMA integrity_check")[0] == "ok"
    ids = {r["id"] for r in s.query("SELECT id FROM files")}
    assert ids == {f"ok-{i}" for i in range(100)}
    assert (s.files_dir / "file-ok").read_bytes() == b"whole"
    assert s.sweep_files(keep={"file-ok"}, prefix="file-") == 1  # the interrupted temp file
    assert sorted(p.name for p in s.files_dir.iterdir()) == ["file-ok"]
    s.close()


def test_state_dir_setting():
    assert resolve_state_dir("none", "m") is None
    assert resolve_state_dir("NONE", "m") is None
    assert resolve_state_dir("/x/y", "m").as_posix() == "/x/y"
    default = resolve_state_dir(None, "my model/v1")
    assert default.parts[-2:] == ("trtserve", "my_model_v1")
