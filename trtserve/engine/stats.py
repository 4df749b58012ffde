"""What an engine reports of itself: one snapshot (`EngineStats`) of per-part stats, as vLLM splits
SchedulerStats, PrefixCacheStats and SpecDecodingStats. Counters run since the engine started."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SchedulerStats:
    running: int = 0  # sequences in the batch
    waiting: int = 0  # requests queued
    preemptions: int = 0  # sequences preempted (their KV recomputed later)
    steps: int = 0  # engine steps run
    prompt_tokens: int = 0  # prompt tokens computed (not cached)
    generated_tokens: int = 0


@dataclass(frozen=True)
class KVCacheStats:
    blocks_total: int = 0
    blocks_used: int = 0
    blocks_free: int = 0  # free and holding no cached prefix
    blocks_cached: int = 0  # free but holding a cached prefix (reusable until evicted)
    utilization: float = 0.0  # used / total
    waste: float = 0.0  # allocated-but-unfilled slots / allocated slots
    block_bytes: int = 0  # bytes of one KV block (K and V, every layer); 0 where unknown


@dataclass(frozen=True)
class PrefixCacheStats:
    queries: int = 0  # prompt tokens looked up
    hits: int = 0  # prompt tokens found cached (the second tier's restores included)
    invalidations: int = 0  # Engine.invalidate_cache calls
    version_refusals: int = 0  # lookups whose prefix was cached only under another context_version
    by_namespace: dict[str, tuple[int, int]] = field(default_factory=dict)  # namespace -> (hit, missed) tokens


@dataclass(frozen=True)
class AdapterCounts:
    """What the requests of one LoRA adapter (by name) asked of the engine since it started."""

    requests: int = 0  # requests submitted under it
    prompt_tokens: int = 0  # prompt tokens computed (prefix-cache hits excluded)
    generated_tokens: int = 0


@dataclass(frozen=True)
class AdapterStats:
    """The LoRA adapter cache: adapters loaded into memory (at start, at run time, or again after an
    eviction), evicted (LRU, over max_cpu_loras), and found in memory when a request wanted one."""

    loads: int = 0
    evictions: int = 0
    hits: int = 0
    by_adapter: dict[str, AdapterCounts] = field(default_factory=dict)  # adapter name -> its requests' counts


@dataclass(frozen=True)
class KVTierStats:
    """The second KV tier (the `kv_offload` option)."""

    hit_tokens: int = 0  # prompt tokens its restores served (part of PrefixCacheStats.hits)
    spills: int = 0  # blocks spilled into it
    restores: int = 0  # blocks restored from it
    refusals: int = 0  # restores refused (a failed checksum)
    bytes: int = 0  # bytes of the blocks it holds
    capacity_bytes: int = 0  # bytes it may hold


@dataclass(frozen=True)
class VisionStats:
    """The vision encoder and its cache (docs/vision.md); all 0 on a text-only engine."""

    encoded: int = 0  # images run through the encoder
    cache_hits: int = 0  # image lookups the encoder cache answered
    cache_misses: int = 0
    cached_images: int = 0  # images the cache holds now
    cached_bytes: int = 0  # bytes of their projected rows


@dataclass
class SpecCounts:
    """Speculative decoding's counts, with vLLM's definitions: acceptance rate = accepted_tokens /
    draft_tokens; mean acceptance length = 1 + accepted_tokens / drafts."""

    drafts: int = 0  # verification passes that carried proposals
    draft_tokens: int = 0  # tokens proposed
    accepted_tokens: int = 0  # proposed tokens the target model kept
    accepted_per_position: list[int] = field(default_factory=list)  # [i]: drafts whose i-th proposal was kept


@dataclass
class EngineStats:
    """The one snapshot front ends read (serve/telemetry/metrics.py)."""

    scheduler: SchedulerStats = field(default_factory=SchedulerStats)
    kv_cache: KVCacheStats = field(default_factory=KVCacheStats)
    prefix_cache: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    spec: SpecCounts = field(default_factory=SpecCounts)  # speculative decoding, all sequences
    adapters: AdapterStats = field(default_factory=AdapterStats)
    kv_tier: KVTierStats = field(default_factory=KVTierStats)
    vision: VisionStats = field(default_factory=VisionStats)
    # seconds the engine spent executing steps since it started (rate() of it: the busy fraction);
    # None where the backend cannot measure it truthfully
    busy_seconds: float | None = None
    # seconds each start-up phase took (e.g. "weights", "kv_cache"), measured by the engine
    startup_seconds: dict[str, float] = field(default_factory=dict)
