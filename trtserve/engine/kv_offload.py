"""The KV cache's second tier in the contract: the `kv_offload` engine option's value.

Full prefix blocks evicted from the first tier (the paged KV cache) spill into a second one with its
own budget (host memory beside a GPU; on CPU a memory-mapped file), and come back on a prefix hit by
copy instead of recompute. Its index is made durable on a clean stop and every `persist_interval_s`,
so a server restarted on the same file and engine starts with those prefixes warm.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ByteSize, ConfigDict, Field


class KVOffloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bytes: ByteSize = Field(gt=0)  # the second tier's budget (e.g. "8GiB"): block contents, not the index
    # where the tier lives; None: under the server's state dir (kv-tier/), else a temporary file that
    # does not outlive the process
    path: Path | None = None
    persist_interval_s: float = Field(30.0, gt=0)  # how often the index is written (and on a clean stop)
    # set by the server, not in configs: where the tier lives when `path` is None (its state dir's
    # kv-tier/<model>/<version>); a backend whose tier is host memory only ignores it
    default_path: Path | None = None

    @property
    def directory(self) -> Path | None:
        """Where a file-backed tier lives: path, else default_path; None: a temporary file."""
        return self.path if self.path is not None else self.default_path
