"""NIXL over host memory: the decode worker reads the prefill worker's staged KV with a one-sided READ.

Each worker registers one pool at start-up (NIXL agents do not see memory a peer registered after they
loaded its metadata), stages payloads in slots of it, and publishes its agent metadata in each
description; the reader loads a peer's metadata once and reads into a slot of its own pool.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import threading
import time
from typing import Any

import numpy as np

from trtserve.dynamo.transport_contract import TransferError

READ_TIMEOUT_S = 30.0


class _Slots:
    """First-fit byte ranges of one pool."""

    def __init__(self, size: int):
        self.size = size
        self._used: dict[str, tuple[int, int]] = {}  # key -> (offset, length)
        self._lock = threading.Lock()

    def take(self, key: str, n: int) -> int:
        with self._lock:
            start = 0
            for off, length in sorted(self._used.values()):
                if off - start >= n:
                    break
                start = off + length
            if start + n > self.size:
                raise TransferError(f"the NIXL pool ({self.size} bytes) has no room for {n} bytes")
            self._used[key] = (start, n)
            return start

    def give(self, key: str) -> None:
        with self._lock:
            self._used.pop(key, None)


class NixlTransport:
    name = "nixl"
    _names = itertools.count()

    def __init__(self, pool_bytes: int):
        os.environ.setdefault("UCX_TLS", "self,sm,tcp")
        os.environ.setdefault("UCX_NET_DEVICES", "lo")
        from nixl_cu12._api import nixl_agent, nixl_agent_config

        self.agent_name = f"trtserve-{os.getpid()}-{next(self._names)}"
        self.agent = nixl_agent(self.agent_name, nixl_agent_config(backends=["UCX"]))
        self.pool = np.zeros(pool_bytes, dtype=np.uint8)
        self.addr = self.pool.ctypes.data
        self._reg = self.agent.register_memory([(self.addr, pool_bytes, 0, "")], "DRAM")
        self.metadata = base64.b64encode(self.agent.get_agent_metadata()).decode()
        self.slots = _Slots(pool_bytes)
        self._peers: dict[str, str] = {}  # peer agent name -> name NIXL knows it by
        self._lock = threading.Lock()

    def stage(self, key: str, data: memoryview | bytes) -> dict[str, Any]:
        view = np.frombuffer(data, dtype=np.uint8)
        off = self.slots.take(key, view.nbytes)
        self.pool[off : off + view.nbytes] = view
        return {"transport": self.name, "agent": self.agent_name, "metadata": self.metadata, "addr": self.addr + off}

    def unstage(self, key: str) -> None:
        self.slots.give(key)

    def fetch(self, where: dict[str, Any], nbytes: int) -> bytes:
        key = f"fetch-{threading.get_ident()}-{time.monotonic_ns()}"
        with self._lock:  # NIXL's agent is driven from one thread at a time here
            peer = self._peers.get(where["agent"])
            if peer is None:
                peer = self._peers[where["agent"]] = self.agent.add_remote_agent(base64.b64decode(where["metadata"]))
            off = self.slots.take(key, nbytes)
            try:
                local = self.agent.get_xfer_descs([(self.addr + off, nbytes, 0)], "DRAM")
                remote = self.agent.get_xfer_descs([(int(where["addr"]), nbytes, 0)], "DRAM")
                handle = self.agent.initialize_xfer("READ", local, remote, peer)
                try:
                    self._wait(handle)
                finally:
                    self.agent.release_xfer_handle(handle)
                return self.pool[off : off + nbytes].tobytes()
            except TransferError:
                raise
            except Exception as err:  # the peer is gone or refused: the caller falls back
                raise TransferError(f"NIXL read failed ({type(err).__name__}: {err})") from None
            finally:
                self.slots.give(key)

    def _wait(self, handle) -> None:
        state = self.agent.transfer(handle)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while state not in ("DONE", "ERR"):
            if time.monotonic() > deadline:
                raise TransferError(f"the NIXL read did not finish within {READ_TIMEOUT_S:.0f} s")
            time.sleep(0.0005)
            state = self.agent.check_xfer_state(handle)
        if state == "ERR":
            raise TransferError("the NIXL read failed (the prefill worker may be gone)")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutting down: nothing is left to read it
            self.agent.deregister_memory(self._reg)
