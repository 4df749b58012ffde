"""File hashing shared by source fingerprints and engine manifests."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

_CHUNK = 64 << 20
SETTLED_S = 2.0  # a file unchanged this long has a ctime no later write can repeat
_verified: dict[tuple, str] = {}  # (path, device, inode, size, mtime, ctime) -> sha256, this process's


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    # large reads into one buffer: a thread hashing beside a busy one (`trtserve run`'s imports) waits for the
    # GIL twice a chunk, so few chunks; read, not mapped: a file cut short meanwhile fails its check, no SIGBUS
    with open(path, "rb") as f:
        buf = bytearray(min(_CHUNK, os.fstat(f.fileno()).st_size + 1))
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def sha256_file_once(path: Path) -> str:
    """sha256_file, computed once per process for a file that has not changed since (the CLI's, the
    repository's and the loader's checks of one engine dir hash its weights once). Any write changes the
    file's ctime; only files settled for SETTLED_S are remembered, so a write cannot repeat the ctime."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _verified:
        return _verified[key]
    digest = sha256_file(path)
    if time.time() - st.st_ctime > SETTLED_S:
        _verified[key] = digest
    return digest


def fingerprint(files: dict[str, Path]) -> str:
    """One hash over (name, content hash) of each file, in name order."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}\0{sha256_file(files[name])}\n".encode())
    return "sha256:" + h.hexdigest()
