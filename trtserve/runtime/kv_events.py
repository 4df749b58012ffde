"""What the prefix cache tells its observers: a full block's prefix was stored, removed, or all were cleared.

The block manager calls each listener synchronously, on the engine thread, as the change happens. So a
listener sees a removed block while its slots still hold the prefix's K and V (a second tier can copy
them out before the block is handed to another sequence), and an exporter (Dynamo's KV events) sees
the events in the order the cache changed. A listener must be quick and must not call back into the
block manager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trtserve.runtime.prefix_scope import PrefixScope


@dataclass(frozen=True, slots=True)
class BlockStored:
    """A full block became reusable under `key`."""

    key: bytes  # its prefix key (prefix_scope.block_key): the chain of every token up to its end
    parent: bytes | None  # the key of the block before it; None for a sequence's first block
    token_ids: tuple[int, ...]  # the block's own tokens (tokens_per_block of them)
    block: int  # its block id in this engine's cache
    scope: PrefixScope  # the salt, namespace, context version and adapter it is keyed in


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """The block no longer holds the prefix `key`."""

    key: bytes
    block: int
    # True: evicted (its slots are about to hold another sequence; they still hold this prefix now);
    # False: invalidated (its namespace or context version was dropped: the contents must not be reused)
    evicted: bool
    scope: PrefixScope


@dataclass(frozen=True, slots=True)
class CacheCleared:
    """Every cached prefix is gone (the cache was replaced or released)."""


KVEvent = BlockStored | BlockRemoved | CacheCleared
KVListener = Callable[[KVEvent], None]
