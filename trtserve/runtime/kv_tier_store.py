"""The second KV tier's storage: fixed-size slots in one memory-mapped file, an LRU of prefix keys.

Each slot holds one full KV block as the cache stores it (PagedKVCache.read_blocks' layout), and
each entry its slot's checksum: a block whose bytes no longer match (a damaged file, or a slot
overwritten after the index was written) is refused, never restored. The file is `blocks.bin` in the
tier's directory, locked while a process uses it; with no directory it is an unlinked temporary file.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import tempfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from trtserve.engine.errors import UserError

DATA_FILE = "blocks.bin"
LOCK_FILE = "lock"


@dataclass(frozen=True)
class Geometry:
    """One KV block as the cache stores it."""

    shape: tuple[int, ...]  # (layers, 2 [K, V], tokens_per_block, kv_heads, head_dim)
    dtype: str  # the storage dtype's name, e.g. "float32"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * getattr(torch, self.dtype).itemsize


@dataclass(slots=True)
class Entry:
    slot: int
    checksum: bytes  # CRC-32 of the slot's bytes when it was written (damage, not tampering: 9x blake2b's speed)
    namespace: str | None  # the prefix's cache_namespace and context_version (for invalidation)
    version: int | None


def checksum(data) -> bytes:
    return zlib.crc32(data).to_bytes(4, "little")


class BlockStore:
    def __init__(self, directory: Path | None, geometry: Geometry, budget: int):
        """budget: bytes of block contents; the file holds budget // geometry.nbytes slots."""
        self.geometry = geometry
        self.num_slots = budget // geometry.nbytes
        if self.num_slots < 1:
            raise UserError(
                f"kv_offload.bytes ({budget} bytes) holds no KV block of this engine ({geometry.nbytes} bytes); "
                f"give at least {geometry.nbytes}"
            )
        self.directory = directory
        self._lock = _lock(directory) if directory is not None else None
        size = self.num_slots * geometry.nbytes
        if directory is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - unlinked: it goes with the process
        else:
            self._file = open(directory / DATA_FILE, "a+b")  # noqa: SIM115 - closed in close()
        os.ftruncate(self._file.fileno(), size)  # sparse: untouched slots take no disk
        self._map = mmap.mmap(self._file.fileno(), size)
        self.slots = torch.frombuffer(self._map, dtype=torch.uint8).view(self.num_slots, geometry.nbytes)
        self.entries: OrderedDict[bytes, Entry] = OrderedDict()  # least recently used first
        self._free = list(range(self.num_slots - 1, -1, -1))  # popped from the end: slot 0 first

    def adopt(self, entries: dict[bytes, Entry]) -> None:
        """Take entries read back from the index (in LRU order); slots past this file or taken twice are dropped."""
        taken = set()
        for key, e in entries.items():
            if 0 <= e.slot < self.num_slots and e.slot not in taken:
                taken.add(e.slot)
                self.entries[key] = e
        self._free = [s for s in range(self.num_slots - 1, -1, -1) if s not in taken]

    @property
    def used_bytes(self) -> int:
        return len(self.entries) * self.geometry.nbytes

    def put(self, key: bytes, block: torch.Tensor, namespace: str | None, version: int | None) -> None:
        """Store one block (as read_blocks returns it, (1, *shape)), evicting the least recently used."""
        if key in self.entries:
            self.entries.move_to_end(key)  # the same prefix's K and V: already here
            return
        if not self._free:
            _, oldest = self.entries.popitem(last=False)
            self._free.append(oldest.slot)
        slot = self._free.pop()
        raw = self.slots[slot]
        raw.copy_(block.reshape(-1).view(torch.uint8))  # from the device, on CUDA
        self.entries[key] = Entry(slot, checksum(raw.numpy()), namespace, version)

    def get(self, key: bytes) -> torch.Tensor | None:
        """The block stored under `key`, (1, *shape) in the storage dtype (a view of the file); None if it
        is not here or its bytes fail their checksum (the entry is dropped then)."""
        e = self.entries.get(key)
        if e is None:
            return None
        raw = self.slots[e.slot]
        if checksum(raw.numpy()) != e.checksum:
            self.drop(key)
            return None
        self.entries.move_to_end(key)
        return raw.view(getattr(torch, self.geometry.dtype)).view(1, *self.geometry.shape)

    def drop(self, key: bytes) -> None:
        e = self.entries.pop(key, None)
        if e is not None:
            self._free.append(e.slot)

    def flush(self) -> None:
        """Write the mapped slots to the file (before an index that names them is written)."""
        self._map.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None


def _lock(directory: Path) -> int:
    """An exclusive lock on the tier's directory: two live engines must not share one file."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(
            f"cannot use the kv_offload directory {directory} ({err.strerror}); give another path"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(
            f"the kv_offload directory {directory} is in use by another engine; give each engine its own path"
        ) from None
    return fd
