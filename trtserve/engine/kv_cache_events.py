"""The prefix-cache events an engine tells subscribers outside it (Engine.subscribe_kv_events).

A full KV block became reusable under a prefix key, stopped being reusable, or every cached prefix
went. The key is the engine's chain hash of every token up to the block's end, rooted at the
engine's fingerprint, the cache salt, the namespace, the context version and the LoRA adapter
(runtime/prefix_scope.py), so two blocks share a key only when a request may reuse one for the other.
Events arrive on the engine's own thread, in the order the cache changed: a subscriber must be quick
and hand them to its own thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PrefixStored:
    key: bytes  # the block's prefix key (16 bytes)
    parent: bytes | None  # the previous block's key; None for a sequence's first block
    token_ids: tuple[int, ...]  # the block's own tokens (tokens_per_block of them)
    block: int  # its block id in the engine's cache
    namespace: str | None  # GenerateRequest.cache_namespace it was computed under
    context_version: int | None
    adapter: str | None  # the LoRA adapter's content hash; None: the base model


@dataclass(frozen=True, slots=True)
class PrefixRemoved:
    key: bytes
    block: int
    evicted: bool  # True: its slots were reused; False: its namespace or version was invalidated


@dataclass(frozen=True, slots=True)
class PrefixCleared:
    """Every cached prefix is gone."""


KVCacheEvent = PrefixStored | PrefixRemoved | PrefixCleared
KVCacheListener = Callable[[KVCacheEvent], None]
