"""The server's durable state: one SQLite file (WAL) in the state dir, files beside it.

Owners: serve/batch (files, batches, their result lines), serve/idempotency (stored responses),
and anyone who appends a migration to `schema.MIGRATIONS`. See /tmp/notes/state-store-api.md.
"""

from trtserve.state.paths import default_state_dir, resolve_state_dir
from trtserve.state.store import StateDirBusy, StateStore

__all__ = ["StateDirBusy", "StateStore", "default_state_dir", "resolve_state_dir"]
