"""The engine's prefix-cache events, published to Dynamo's KV router.

The engine calls the listener on its own thread; `KVEventBridge` only hands each event to the worker's
event loop (`call_soon_threadsafe`), where it is published in order. The router hashes block tokens
itself, so `block_hashes` only need to be stable engine ids: the first 8 bytes of our prefix key,
whose chain already holds the engine fingerprint, salt, namespace, context version and adapter.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from trtserve.dynamo.mapping import block_hash
from trtserve.engine.kv_cache_events import KVCacheEvent, PrefixCleared, PrefixRemoved, PrefixStored

log = logging.getLogger(__name__)


class KVEventBridge:
    """engine thread -> event loop -> Dynamo's KvEventPublisher (publish_stored / publish_removed)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, publisher: Any):
        self.loop = loop
        self.publisher = publisher
        self._live: set[int] = set()  # hashes published as stored and not yet removed (for CacheCleared)
        self.closed = False

    def on_event(self, event: KVCacheEvent) -> None:
        """The engine's listener: quick, any thread."""
        if not self.closed:
            self.loop.call_soon_threadsafe(self._publish, event)

    def _publish(self, event: KVCacheEvent) -> None:
        if self.closed:
            return
        try:
            if isinstance(event, PrefixStored):
                h = block_hash(event.key)
                parent = block_hash(event.parent) if event.parent is not None else None
                self.publisher.publish_stored(
                    token_ids=list(event.token_ids),
                    num_block_tokens=[len(event.token_ids)],
                    block_hashes=[h],
                    parent_hash=parent,
                )
                self._live.add(h)
            elif isinstance(event, PrefixRemoved):
                h = block_hash(event.key)
                self._live.discard(h)
                self.publisher.publish_removed(block_hashes=[h])
            elif isinstance(event, PrefixCleared) and self._live:
                self.publisher.publish_removed(block_hashes=sorted(self._live))
                self._live.clear()
        except Exception:  # a dropped event makes the router's view stale, never the request fail
            log.exception("Dynamo's KV publisher refused a %s event", type(event).__name__)

    def close(self) -> None:
        self.closed = True
