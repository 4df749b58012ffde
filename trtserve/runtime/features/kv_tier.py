"""The prefix cache's second tier (runtime/kv_tier.py) as an engine-core feature: attached to each KV
cache made, saved before one is released, its index written as time passes and on close."""

from __future__ import annotations

from trtserve.engine.stats import KVTierStats
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.kv_tier import KVTier


class NoTier(EngineFeature):
    def stats(self) -> KVTierStats:
        return KVTierStats()


class Tier(NoTier):
    def __init__(self, tier: KVTier):
        self.tier = tier

    def on_cache(self, blocks, kv) -> None:
        self.tier.attach(blocks, kv)

    def on_release_cache(self, blocks) -> None:
        self.tier.save(blocks)
        self.tier.detach()  # it holds no reference to the old storage

    def tick(self) -> None:
        self.tier.tick()  # the index, every persist_interval_s

    def close(self, blocks) -> None:
        self.tier.close(blocks)

    def invalidate(self, namespace, before_version) -> None:
        self.tier.invalidate(namespace, before_version)

    def stats(self) -> KVTierStats:
        return self.tier.stats()
