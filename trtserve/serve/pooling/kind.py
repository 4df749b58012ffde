"""The pooling kind's detector (serve/repository/kinds.py: POOLING): an engine dir whose manifest
records a pooling head (engine/pooling.py)."""

from __future__ import annotations

from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.manifest import MANIFEST, read_manifest


def pooling_dir(model_dir: Path, version_dir: Path) -> Path | None:
    """The version dir itself when it is a pooling engine dir (it has no config dir of its own); None otherwise.
    A manifest that cannot be read is left to the LLM kind, whose opener says what is wrong with it."""
    if not (version_dir / MANIFEST).is_file():
        return None
    try:
        return version_dir if read_manifest(version_dir).pooling is not None else None
    except UserError:
        return None
