"""What one `trtserve dynamo` worker is: its engine dir, role, names and hand-off settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtserve.engine.kv_transfer import DEFAULT_HOLD_S
from trtserve.engine.run_config import RuntimeConfig

ROLES = ("aggregated", "prefill", "decode")
# Dynamo's component per role: the frontend finds decode (and aggregated) workers under "backend" and
# turns its prefill router on when a worker registers as a prefill worker under its own component.
COMPONENTS = {"aggregated": "backend", "prefill": "prefill", "decode": "backend"}
TRANSPORTS = ("auto", "nixl", "shm")


@dataclass
class WorkerSettings:
    engine_dir: Path
    role: str = "aggregated"  # one of ROLES
    namespace: str = "dynamo"
    served_model_name: str | None = None  # None: the engine dir's name
    model_dir: Path | None = None  # the registration dir (model_dir.py); None: under the engine's cache dir
    run_config: RuntimeConfig = field(default_factory=RuntimeConfig)
    discovery_backend: str = "file"  # "file" (DYN_FILE_KV), "etcd" or "mem"
    request_plane: str = "tcp"
    event_plane: str = "zmq"
    hold_s: float = DEFAULT_HOLD_S  # a prefill's KV is freed after this long if no decode worker pulled it
    transport: str = "auto"  # one of TRANSPORTS
    transfer_pool_bytes: int = 256 << 20  # NIXL's registered host pool, per worker

    @property
    def component(self) -> str:
        return COMPONENTS[self.role]

    @property
    def name(self) -> str:
        return self.served_model_name or self.engine_dir.resolve().name
