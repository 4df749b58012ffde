"""The paged KV cache's bookkeeping: block tables, ref counts, prefix reuse and LRU eviction.

Every block is in exactly one of two states: referenced (ref_count > 0, held by one or more block
tables) or free (ref_count == 0, in `_free`, ordered least- to most-recently released). A free
block may still hold a cached prefix (its hash is in `_cached`); it is reused for that prefix
until it is evicted, which happens only when a new block is needed and it is the oldest free one.

Prefix keys form a hash chain rooted at (engine fingerprint, cache_salt, cache_namespace,
context_version) (prefix_scope.py), so a changed engine, salt, namespace or context version never
matches an old block. `invalidate` drops a namespace's cached prefixes at once; the requests
running in it keep their blocks until they finish but register no new prefix.

Listeners (kv_events.py) hear every prefix stored, evicted or invalidated, as it happens.
With a second tier (kv_tier.py: the `kv_offload` option), a lookup that runs past the blocks this
cache holds restores the next ones the tier holds into free blocks, which then count as cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trtserve.engine.errors import UserError
from trtserve.runtime.kv_events import BlockRemoved, BlockStored, CacheCleared, KVEvent, KVListener
from trtserve.runtime.prefix_scope import NamespaceCounters, PrefixScope, block_key, chain_root, head_key

__all__ = ["BlockManager", "BlockStats", "PrefixScope", "block_key", "chain_root"]


@dataclass
class BlockStats:
    num_blocks: int
    used: int  # referenced by at least one block table
    free: int  # unreferenced and holding no cached prefix
    cached: int  # unreferenced but holding a reusable prefix (evictable)
    utilization: float  # used / num_blocks
    prefix_queries: int  # prompt tokens looked up in the prefix cache
    prefix_hits: int  # of those, tokens found cached
    waste: float  # allocated-but-unfilled token slots / allocated slots, over used blocks
    invalidations: int = 0  # invalidate() calls
    version_refusals: int = 0  # lookups whose first block was cached only under another context_version
    by_namespace: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (hit, missed) tokens


class SecondTier(Protocol):
    """Where evicted prefixes went (runtime/kv_tier.py): asked past the last block this cache holds."""

    def holds(self, key: bytes) -> bool: ...

    def restore(self, key: bytes, block: int) -> bool:
        """Copy prefix `key`'s K and V into `block`; False if it cannot (the block is untouched then)."""


class BlockManager:
    def __init__(self, num_blocks: int, tokens_per_block: int, namespace: str, enable_prefix_caching: bool = True):
        """namespace: the engine's fingerprint, the root of every prefix key."""
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.block_size = tokens_per_block
        self.namespace = namespace
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._key: list[bytes | None] = [None] * num_blocks  # prefix key a block holds, if any
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._cached: dict[bytes, int] = {}  # prefix key -> block id
        self._tables: dict[Hashable, list[int]] = {}  # sequence -> block ids
        self._num_tokens: dict[Hashable, int] = {}  # sequence -> token slots in use
        self._chain: dict[Hashable, list[bytes]] = {}  # sequence -> keys of its full, hashed blocks
        self._scope: dict[Hashable, PrefixScope] = {}  # sequence -> the scope its blocks are keyed in
        self._frozen: set[Hashable] = set()  # sequences whose scope was invalidated: they register nothing
        self._block_scope: list[PrefixScope | None] = [None] * num_blocks  # scope of a keyed block
        self._head: list[bytes | None] = [None] * num_blocks  # head key of a keyed first block
        self._heads: dict[bytes, set[int | None]] = {}  # head key -> versions cached under it
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.invalidations = 0
        self.version_refusals = 0
        self.by_namespace = NamespaceCounters()
        self._cached_free = 0  # free blocks holding a prefix key, kept in step so stats() is O(requests)
        self._listeners: list[KVListener] = []
        self.second_tier: SecondTier | None = None  # runtime/kv_tier.py: prefixes past this cache's own

    def subscribe(self, listener: KVListener) -> None:
        """Call `listener` with every KV event from now on (kv_events.py says when and how)."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: KVListener) -> None:
        self._listeners.remove(listener)

    def _emit(self, event: KVEvent) -> None:
        for listener in self._listeners:
            listener(event)

    def carry_over(self, old: BlockManager) -> None:
        """Take over a replaced manager's counters and listeners (a resized cache starts empty)."""
        self.prefix_queries, self.prefix_hits = old.prefix_queries, old.prefix_hits
        self.by_namespace, self.invalidations = old.by_namespace, old.invalidations
        self.version_refusals = old.version_refusals
        self._listeners = old._listeners

    def clear(self) -> None:
        """Forget every cached prefix of the free blocks (the cache is being replaced or released);
        blocks held by running requests keep theirs. Listeners hear CacheCleared."""
        for block in [b for b in self._free if self._key[b] is not None]:
            self._forget(block, evicted=False, announce=False)
        self._emit(CacheCleared())

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (free or evictable cached)."""
        return len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def check_fits(self, num_seqs: int, num_tokens: int) -> None:
        """UserError unless num_seqs sequences of num_tokens each could ever fit in the whole cache."""
        needed = num_seqs * self.blocks_for(num_tokens)
        if needed > self.num_blocks:
            raise UserError(
                f"the request needs {needed} KV blocks but the cache has {self.num_blocks}; "
                "lower max_tokens or n, or give the server a larger kv_cache_memory"
            )

    def block_table(self, seq: Hashable) -> list[int]:
        return self._tables[seq]

    def has(self, seq: Hashable) -> bool:
        return seq in self._tables

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    # ---- prefix lookup -------------------------------------------------------------------
    def lookup_prefix(self, token_ids: Sequence[int], salt: PrefixScope | str | None) -> list[int]:
        """Cached blocks holding a prefix of token_ids (never the last token, whose logits are needed).
        salt: the request's PrefixScope (or a bare cache_salt)."""
        scope = PrefixScope.of(salt)
        usable = (len(token_ids) - 1) // self.block_size
        self.prefix_queries += len(token_ids)
        if not self.enable_prefix_caching:
            self.by_namespace.add(scope, len(token_ids), 0)
            return []
        hits, key = [], chain_root(self.namespace, scope)
        for i in range(usable):
            key = block_key(key, token_ids[i * self.block_size : (i + 1) * self.block_size])
            block = self._cached.get(key)
            if block is None:
                break
            hits.append(block)
        if self.second_tier is not None and len(hits) < usable:
            hits += self._restore(token_ids, hits, key, scope, usable)
        if usable and not hits and self._refused_by_version(scope, token_ids[: self.block_size]):
            self.version_refusals += 1
        self.prefix_hits += len(hits) * self.block_size
        self.by_namespace.add(scope, len(token_ids), len(hits) * self.block_size)
        return hits

    def _refused_by_version(self, scope: PrefixScope, first_block: Sequence[int]) -> bool:
        head = head_key(self.namespace, scope, first_block)
        return head is not None and bool(self._heads.get(head, set()) - {scope.version})

    # ---- allocation ----------------------------------------------------------------------
    def allocate(
        self, seq: Hashable, cached_blocks: list[int], num_tokens: int, salt: PrefixScope | str | None = None
    ) -> bool:
        """Give a new request the cached prefix blocks plus new ones for `num_tokens` slots in all.
        salt: the PrefixScope its blocks are keyed in (or a bare cache_salt)."""
        assert seq not in self._tables, seq
        need = self.blocks_for(num_tokens) - len(cached_blocks)
        # Cached blocks that are free leave the free pool when taken.
        reclaimed = sum(1 for b in cached_blocks if self._ref[b] == 0)
        if need > len(self._free) - reclaimed:
            return False
        for b in cached_blocks:
            self._take(b)
        table = list(cached_blocks) + [self._pop_free() for _ in range(max(need, 0))]
        self._tables[seq] = table
        self._num_tokens[seq] = num_tokens
        self._scope[seq] = PrefixScope.of(salt)
        self._chain[seq] = [self._key[b] for b in cached_blocks]  # type: ignore[misc]
        return True

    def append_slots(self, seq: Hashable, num_tokens: int) -> bool:
        """Grow a request's table to hold `num_tokens` slots; False (and no change) if blocks ran out."""
        table = self._tables[seq]
        need = self.blocks_for(num_tokens) - len(table)
        if need > len(self._free):
            return False
        table.extend(self._pop_free() for _ in range(max(need, 0)))
        self._num_tokens[seq] = max(num_tokens, self._num_tokens[seq])
        return True

    def truncate(self, seq: Hashable, num_tokens: int) -> None:
        """Shrink a request's table to `num_tokens` slots (rejected speculative tokens' slots): its tail
        blocks past them are released. Those blocks were never committed, so no prefix key is lost."""
        table = self._tables[seq]
        keep = self.blocks_for(num_tokens)
        assert len(self._chain[seq]) <= num_tokens // self.block_size, "a committed block would be dropped"
        for b in reversed(table[keep:]):
            self._release(b)
        del table[keep:]
        self._num_tokens[seq] = num_tokens

    def commit(self, seq: Hashable, token_ids: Sequence[int], num_computed: int) -> None:
        """Register the request's blocks that became full (num_computed tokens are in the cache)."""
        if not self.enable_prefix_caching or seq in self._frozen:
            return
        chain, table, scope = self._chain[seq], self._tables[seq], self._scope[seq]
        key = chain[-1] if chain else chain_root(self.namespace, scope)
        for i in range(len(chain), num_computed // self.block_size):
            block_tokens = token_ids[i * self.block_size : (i + 1) * self.block_size]
            key = block_key(key, block_tokens)
            chain.append(key)
            block = table[i]
            if key not in self._cached and self._key[block] is None:
                self._register(block, key, chain[-2] if len(chain) > 1 else None, block_tokens, scope, i == 0)

    def _register(
        self, block: int, key: bytes, parent: bytes | None, block_tokens: Sequence[int], scope: PrefixScope, first: bool
    ) -> None:
        """The block now holds the prefix `key` (computed, or restored from the second tier)."""
        self._cached[key] = block
        self._key[block] = key
        self._block_scope[block] = scope
        if first and (head := head_key(self.namespace, scope, block_tokens)) is not None:
            self._head[block] = head
            self._heads.setdefault(head, set()).add(scope.version)
        if self._listeners:
            self._emit(BlockStored(key, parent, tuple(block_tokens), block, scope))

    def _restore(
        self, token_ids: Sequence[int], hits: list[int], key: bytes, scope: PrefixScope, usable: int
    ) -> list[int]:
        """The blocks after `hits` (key: the next one's) that the second tier holds, copied into free blocks
        that join the cache as if computed: cached and free, so allocate takes them like any hit. The hits
        are never evicted for them, and one free block is left for the prompt's tail."""
        tier, bs = self.second_tier, self.block_size
        if tier is None or not tier.holds(key):
            return []
        for b in reversed(hits):  # most recently used: the pops below take other blocks
            if self._ref[b] == 0:
                self._free.move_to_end(b)
        spare = len(self._free) - sum(1 for b in hits if self._ref[b] == 0) - 1
        restored, parent, i = [], self._key[hits[-1]] if hits else None, len(hits)
        while i < usable and len(restored) < spare and tier.holds(key):
            block = self._pop_free()
            if not tier.restore(key, block):  # refused (a damaged block): it is recomputed
                self._release(block)
                self._free.move_to_end(block, last=False)
                break
            self._register(block, key, parent, token_ids[i * bs : (i + 1) * bs], scope, i == 0)
            self._release(block)
            restored.append(block)
            parent, i = key, i + 1
            if i < usable:
                key = block_key(key, token_ids[i * bs : (i + 1) * bs])
        return restored

    def cached_prefixes(self) -> list[tuple[bytes, int, PrefixScope]]:
        """Every prefix the cache holds: (key, block, scope)."""
        return [(k, b, self._block_scope[b]) for k, b in self._cached.items()]  # type: ignore[misc]

    def invalidate(self, namespace: str | None, before_version: int | None = None) -> int:
        """Drop the cached prefixes of `namespace` (only those of versions < before_version, when
        given; blocks cached with no version count as older). Returns how many blocks were dropped.

        Free blocks lose their prefix and go to the front of the free list; blocks held by running
        requests keep their contents for those requests (their ref counts do not change), but no
        new request can hit them, and those requests register no new prefix.
        """
        dropped = 0
        for block in list(self._cached.values()):
            scope = self._block_scope[block]
            if scope is not None and scope.matches(namespace, before_version):
                self._forget(block, evicted=False)
                if self._ref[block] == 0:
                    self._free.move_to_end(block, last=False)  # handed out before any cached block
                dropped += 1
        self._frozen |= {s for s, sc in self._scope.items() if sc.matches(namespace, before_version)}
        self.invalidations += 1
        return dropped

    def fork(self, parent: Hashable, child: Hashable, num_tokens: int) -> list[tuple[int, int]]:
        """Share the parent's full blocks with a child; copy its partial last block.

        Returns (src, dst) block copies the runner must perform; raises MemoryError if no block
        is free for the copy (the caller reserved enough before forking).
        """
        table = self._tables[parent]
        full = num_tokens // self.block_size
        shared = table[:full]
        copies = []
        for b in shared:
            self._take(b)
        table_child = list(shared)
        if num_tokens % self.block_size:
            if not self._free:
                for b in shared:
                    self._release(b)
                raise MemoryError("no free KV block to fork into")
            dst = self._pop_free()
            copies.append((table[full], dst))
            table_child.append(dst)
        self._tables[child] = table_child
        self._num_tokens[child] = num_tokens
        self._scope[child] = self._scope[parent]
        if parent in self._frozen:
            self._frozen.add(child)
        self._chain[child] = list(self._chain[parent][:full])
        return copies

    def free(self, seq: Hashable) -> None:
        """Release a request's blocks, tail first, so the LRU evicts a prefix's tail before its head."""
        table = self._tables.pop(seq, None)
        if table is None:
            return
        for b in reversed(table):
            self._release(b)
        del self._num_tokens[seq], self._chain[seq], self._scope[seq]
        self._frozen.discard(seq)

    # ---- internals -----------------------------------------------------------------------
    def _take(self, block: int) -> None:
        if self._ref[block] == 0:
            del self._free[block]
            self._cached_free -= self._key[block] is not None
        self._ref[block] += 1

    def _release(self, block: int) -> None:
        self._ref[block] -= 1
        assert self._ref[block] >= 0
        if self._ref[block] == 0:
            self._free[block] = None  # most recently used end
            self._cached_free += self._key[block] is not None

    def _pop_free(self) -> int:
        block, _ = self._free.popitem(last=False)  # least recently used
        if self._key[block] is not None:  # evict its cached prefix
            self._forget(block, evicted=True)
        self._ref[block] = 1
        return block

    def _forget(self, block: int, evicted: bool, announce: bool = True) -> None:
        """The block no longer holds a reusable prefix (evicted: its slots are about to be reused;
        else invalidated or cleared)."""
        if self._ref[block] == 0:
            self._cached_free -= 1
        key = self._key[block]
        del self._cached[key]  # type: ignore[arg-type]
        head, scope = self._head[block], self._block_scope[block]
        if announce and self._listeners:
            self._emit(BlockRemoved(key, block, evicted, scope))  # type: ignore[arg-type]
        if head is not None and scope is not None:
            versions = self._heads[head]
            versions.discard(scope.version)
            if not versions:
                del self._heads[head]
        self._key[block], self._block_scope[block], self._head[block] = None, None, None

    # ---- stats ---------------------------------------------------------------------------
    def stats(self) -> BlockStats:
        """O(requests), not O(blocks): the engine snapshots this after every step.

        Unfilled slots lie only in a table's tail blocks (past its token count), and those are
        never shared: prefix hits and forks share full blocks only. So the waste is the sum over
        tables of their slots minus their tokens; `check_invariants` recounts it block by block.
        """
        used = self.num_blocks - len(self._free)
        cached = self._cached_free
        slots = used * self.block_size
        unfilled = sum(max(len(t) * self.block_size - self._num_tokens[seq], 0) for seq, t in self._tables.items())
        return BlockStats(
            num_blocks=self.num_blocks,
            used=used,
            free=len(self._free) - cached,
            cached=cached,
            utilization=used / self.num_blocks,
            prefix_queries=self.prefix_queries,
            prefix_hits=self.prefix_hits,
            waste=unfilled / slots if slots else 0.0,
            invalidations=self.invalidations,
            version_refusals=self.version_refusals,
            by_namespace=self.by_namespace.snapshot(),
        )

    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent (tests call this after every operation)."""
        holders = [0] * self.num_blocks
        for table in self._tables.values():
            for b in table:
                holders[b] += 1
        assert holders == self._ref, "ref counts differ from the number of tables holding each block"
        for b in range(self.num_blocks):
            assert (self._ref[b] == 0) == (b in self._free), f"block {b} is not exactly one of free/referenced"
        for key, b in self._cached.items():
            assert self._key[b] == key
        assert sum(k is not None for k in self._key) == len(self._cached)
        assert self._cached_free == sum(1 for b in self._free if self._key[b] is not None)
        for b in range(self.num_blocks):
            assert (self._key[b] is None) == (self._block_scope[b] is None), f"block {b}: key and scope differ"
            assert self._head[b] is None or self._key[b] is not None
        heads: dict[bytes, set] = {}
        for b, head in enumerate(self._head):
            scope = self._block_scope[b]
            if head is not None and scope is not None:
                heads.setdefault(head, set()).add(scope.version)
        assert heads == self._heads, "head keys differ from the first blocks holding them"
        assert self._frozen <= self._scope.keys()
        filled: dict[int, int] = {}  # the waste, recounted per block over every table holding it
        for seq, table in self._tables.items():
            n = self._num_tokens[seq]
            for i, b in enumerate(table):
                filled[b] = max(filled.get(b, 0), min(self.block_size, max(n - i * self.block_size, 0)))
        slots = (self.num_blocks - len(self._free)) * self.block_size
        waste = (slots - sum(filled.values())) / slots if slots else 0.0
        assert abs(self.stats().waste - waste) < 1e-12, (self.stats().waste, waste)
