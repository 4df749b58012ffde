"""File hashing shared by source fingerprints and engine manifests."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 8 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(files: dict[str, Path]) -> str:
    """One hash over (name, content hash) of each file, in name order."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}\0{sha256_file(files[name])}\n".encode())
    return "sha256:" + h.hexdigest()
