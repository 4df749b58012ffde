"""Where the `kv_offload` engine option's second KV tier lives when the run config names no path:
under the server's state dir, one directory per model version, so a restarted server finds it."""

from __future__ import annotations

import re
from pathlib import Path

from trtserve.engine.run_config import RuntimeConfig

TIER_DIR = "kv-tier"


def tier_root(store) -> Path | None:
    """The state dir's kv-tier/ (None with --state-dir none, or when another server holds the dir)."""
    return None if store is None else store.root / TIER_DIR


def with_tier_path(run: RuntimeConfig, root: Path | None, model: str, version: int) -> RuntimeConfig:
    """`run` with its kv_offload tier's default_path at root/<model>/<version>, used where it names no
    path (no root: a temporary file that goes with the process)."""
    tier = run.kv_offload
    if tier is None or root is None:
        return run
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"
    path = root / safe / str(version)
    return run.model_copy(update={"kv_offload": tier.model_copy(update={"default_path": path})})
