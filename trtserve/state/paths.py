"""Where a server keeps its state: `--state-dir DIR`, `none` for no durable features, or a default
under the user's data dir named after the server."""

from __future__ import annotations

import os
import re
from pathlib import Path

OFF = "none"


def default_state_dir(server_name: str) -> Path:
    """$XDG_DATA_HOME/trtserve/<server name> (~/.local/share/trtserve/<server name> by default)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", server_name).strip("._") or "server"
    return base / "trtserve" / safe


def resolve_state_dir(setting: str | None, server_name: str) -> Path | None:
    """None (unset) -> the default dir; "none" -> None (durable features off); else that path."""
    if setting is None:
        return default_state_dir(server_name)
    if setting.strip().lower() == OFF:
        return None
    return Path(setting).expanduser()
