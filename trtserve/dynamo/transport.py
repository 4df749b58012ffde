"""How a prompt's KV bytes travel from the prefill worker to the decode worker.

The prefill side `stage`s a payload's bytes under a key and describes them in a JSON-able dict; the
decode side `fetch`es them with that description; the prefill side `unstage`s them once the decode side
released them (or their hold ran out). `NixlTransport` (nixl_transport.py) reads host memory through
NIXL where the nixl wheel loads; `ShmTransport` is ours: one POSIX shared-memory segment a payload.
Both follow transport_contract.py (KVTransport, TransferError: importable from here too).
"""

from __future__ import annotations

import logging
import uuid
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from trtserve.dynamo.transport_contract import KVTransport, TransferError

log = logging.getLogger(__name__)


class ShmTransport:
    """One shared-memory segment a staged payload; the decode worker maps it and copies it out."""

    name = "shm"

    def __init__(self):
        self._segments: dict[str, shared_memory.SharedMemory] = {}

    def stage(self, key: str, data: memoryview | bytes) -> dict[str, Any]:
        view = memoryview(data).cast("B")
        seg = shared_memory.SharedMemory(
            name=f"trtserve-kv-{uuid.uuid4().hex[:16]}", create=True, size=max(view.nbytes, 1)
        )
        seg.buf[: view.nbytes] = view
        self._segments[key] = seg
        return {"transport": self.name, "segment": seg.name}

    def unstage(self, key: str) -> None:
        seg = self._segments.pop(key, None)
        if seg is not None:
            seg.close()
            seg.unlink()

    def fetch(self, where: dict[str, Any], nbytes: int) -> bytes:
        try:
            seg = shared_memory.SharedMemory(name=where["segment"])
        except (FileNotFoundError, KeyError) as err:
            raise TransferError(f"the staged KV is gone ({err})") from None
        # the segment is the prefill worker's: this process must not unlink it when it exits
        resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]
        try:
            if seg.size < nbytes:
                raise TransferError(f"the staged KV holds {seg.size} bytes, not {nbytes}")
            return bytes(seg.buf[:nbytes])
        finally:
            seg.close()

    def close(self) -> None:
        for key in list(self._segments):
            self.unstage(key)


def make_transport(kind: str, pool_bytes: int) -> KVTransport:
    """kind "auto": NIXL where the nixl wheel loads, else shared memory; "nixl" or "shm": that one."""
    if kind in ("auto", "nixl"):
        try:
            from trtserve.dynamo.nixl_transport import NixlTransport

            return NixlTransport(pool_bytes)
        except Exception as err:  # the wheel is missing or its UCX backend will not start
            if kind == "nixl":
                raise
            log.info("NIXL is unavailable (%s: %s); moving KV through shared memory", type(err).__name__, err)
    return ShmTransport()
