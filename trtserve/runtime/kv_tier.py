"""The prefix cache's second tier (the `kv_offload` engine option): evicted blocks spill here and come
back by copy on a later prefix hit instead of being recomputed.

It listens to the block manager's KV events (kv_events.py): an evicted block's K and V are copied out
while its slots still hold them; an invalidated block is dropped. The block manager asks it, past the
last block its own cache holds, whether it `holds` the next prefix key and has it `restore` that block
into a fresh one (block_manager.py: lookup_prefix). Keys are the prefix keys themselves, chained from
the engine fingerprint, salt, namespace, context version and adapter (prefix_scope.py), so a block is
only ever restored for the exact prefix it was computed for. It is inclusive: a restored block keeps
its copy here, so evicting it again costs nothing.

Its index is written on close, every persist_interval_s and after an invalidation (kv_tier_index.py);
a tier in a directory is reused by the next engine with the same fingerprint.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.stats import KVTierStats
from trtserve.models.kv_cache import PagedKVCache
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.kv_events import BlockRemoved, KVEvent
from trtserve.runtime.kv_tier_index import read_index, write_index
from trtserve.runtime.kv_tier_store import BlockStore, Geometry

log = logging.getLogger(__name__)


def geometry_of(kv: PagedKVCache) -> Geometry:
    layers, kv_pair, _, heads, head_dim = kv.data.shape
    return Geometry((layers, kv_pair, kv.tokens_per_block, heads, head_dim), str(kv.data.dtype).removeprefix("torch."))


class KVTier:
    """One engine core's second tier: its store, the block manager's hooks and the counters."""

    def __init__(self, config: KVOffloadConfig, fingerprint: str):
        self.config, self.fingerprint = config, fingerprint
        self.directory: Path | None = config.directory
        self.store: BlockStore | None = None  # opened at the first attach: its geometry is the cache's
        self.kv: PagedKVCache | None = None
        self.block_size = 0  # tokens per block
        self.spills = self.restores = self.refusals = self.hit_tokens = 0
        self._dirty = False  # entries changed since the index was last written
        self._persisted = time.monotonic()

    # ---- wiring ------------------------------------------------------------------------------
    def attach(self, blocks: BlockManager, kv: PagedKVCache) -> None:
        """Serve `blocks` over the cache `kv` (again after a resize or a wake-up)."""
        if self.store is None:
            geometry = geometry_of(kv)
            self.store = BlockStore(self.directory, geometry, int(self.config.bytes))
            if self.directory is not None:
                self.store.adopt(read_index(self.directory, self.fingerprint, geometry))
            _pin(self.store, kv.data.device)
        self.kv, self.block_size = kv, kv.tokens_per_block
        blocks.second_tier = self
        blocks.subscribe(self.on_event)  # a replaced manager's listeners carry over in its place (carry_over)

    def detach(self) -> None:
        """The cache is being released (sleep): nothing is read from it until the next attach."""
        self.kv = None

    def _attached(self) -> tuple[BlockStore, PagedKVCache]:
        """The store and the cache: the block manager calls in only between attach and detach."""
        assert self.store is not None and self.kv is not None, "the second tier is not attached to a cache"
        return self.store, self.kv

    # ---- the block manager's side -------------------------------------------------------------
    def on_event(self, event: KVEvent) -> None:
        if not isinstance(event, BlockRemoved) or self.kv is None:
            return
        if event.evicted:  # its slots still hold the prefix: copy it out before they are reused
            self.spill(event.key, event.block, event.scope.namespace, event.scope.version)
        else:  # invalidated: its contents must never be reused
            self._attached()[0].drop(event.key)
            self._dirty = True

    def spill(self, key: bytes, block: int, namespace: str | None, version: int | None) -> None:
        store, kv = self._attached()
        if key in store.entries:  # a restored block's copy is still here
            store.entries.move_to_end(key)
            return
        store.put(key, kv.read_blocks([block]), namespace, version)
        self.spills += 1
        self._dirty = True

    def holds(self, key: bytes) -> bool:
        return self.store is not None and key in self.store.entries

    def restore(self, key: bytes, block: int) -> bool:
        """Copy the prefix `key` into cache block `block`; False (the entry dropped) if its checksum fails."""
        store, kv = self._attached()
        data = store.get(key)
        if data is None:
            self.refusals += 1
            self._dirty = True
            log.warning("kv_offload: a block failed its checksum; it is recomputed instead")
            return False
        kv.write_blocks([block], data)
        self.restores += 1
        self.hit_tokens += self.block_size
        return True

    # ---- durability -----------------------------------------------------------------------------
    def invalidate(self, namespace: str | None, before_version: int | None = None) -> int:
        """Drop the namespace's blocks (only versions < before_version, when given; no version counts as
        older), and write the index at once so a restart never sees them. Returns how many."""
        if self.store is None:
            return 0
        stale = [
            k
            for k, e in self.store.entries.items()
            if e.namespace == namespace and (before_version is None or e.version is None or e.version < before_version)
        ]
        for key in stale:
            self.store.drop(key)
        if stale:
            self._dirty = True
            self.persist()
        return len(stale)

    def save(self, blocks: BlockManager) -> None:
        """Copy every prefix the first tier holds into this one (before a stop or a sleep releases it)."""
        if self.kv is None:
            return
        for key, block, scope in blocks.cached_prefixes():
            self.spill(key, block, scope.namespace, scope.version)

    def tick(self) -> None:
        """Write the index if persist_interval_s has passed since the last write and anything changed."""
        if self._dirty and time.monotonic() - self._persisted >= self.config.persist_interval_s:
            self.persist()

    def persist(self) -> None:
        self._persisted = time.monotonic()
        if self.directory is None or self.store is None:
            return
        self.store.flush()  # the blocks reach the file before an index names them
        write_index(self.directory, self.fingerprint, self.store.geometry, self.store.entries)
        self._dirty = False

    def close(self, blocks: BlockManager | None = None) -> None:
        """A clean stop: save the first tier's prefixes (when given), write the index, release the file."""
        if self.store is None:
            return
        if blocks is not None:
            self.save(blocks)
        self.persist()
        self.store.close()
        self.store = None

    def stats(self) -> KVTierStats:
        store = self.store
        return KVTierStats(
            hit_tokens=self.hit_tokens,
            spills=self.spills,
            restores=self.restores,
            refusals=self.refusals,
            bytes=store.used_bytes if store is not None else 0,
            capacity_bytes=store.num_slots * store.geometry.nbytes if store is not None else 0,
        )


def _pin(store: BlockStore, device: torch.device) -> None:
    """On CUDA, page-lock the mapped file so copies to and from the GPU run at full speed (best effort)."""
    if device.type != "cuda":
        return
    t = store.slots
    try:
        err = int(torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel(), 0))
    except Exception as e:  # an older torch without the binding
        err = e
    if err:
        log.warning("kv_offload: could not page-lock the second tier (%s); its copies are slower", err)
