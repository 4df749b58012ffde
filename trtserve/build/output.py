"""Atomic engine-dir writes: build into a hidden temporary dir beside the target, then rename."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.manifest import MANIFEST


def check_target(out: Path, force: bool) -> None:
    if out.exists() or out.is_symlink():
        if not force:
            raise UserError(f"output dir {out} already exists; pass --force to replace it or choose another -o")
        if not out.is_dir():
            raise UserError(f"output path {out} exists and is not a directory; remove it or choose another -o")
        if any(out.iterdir()) and not (out / MANIFEST).exists():
            raise UserError(f"{out} is not empty and not an engine dir; refusing to replace it even with --force")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(out: Path) -> None:
    """Remove staging dirs of earlier builds of `out` whose process was killed (e.g. SIGKILL)."""
    for stale in out.parent.glob(f".{out.name}.building-*"):
        pid = stale.name.rsplit(".building-", 1)[1].split("-", 1)[0]
        if pid.isascii() and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(out: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary dir; on success it replaces `out`, on any failure it is removed."""
    check_target(out, force)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-{os.getpid()}-", dir=parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; an engine dir is an ordinary dir
    except OSError as err:
        raise UserError(f"cannot write the engine under {parent} ({err.strerror}); choose a writable -o") from None
    try:
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
            out.rename(old / "engine")
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"writing the engine to {out} failed ({err.strerror or err}); check free disk space and permissions"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
