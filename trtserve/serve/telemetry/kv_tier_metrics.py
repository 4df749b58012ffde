"""The KV cache's tiers on /metrics: prefix hits by tier, the second tier's spills, restores and
refusals, and the bytes each tier holds (read from EngineStats at scrape time, like the rest).

tier="1" is the KV cache itself, tier="2" the `kv_offload` second tier (host memory or a file)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LABELS = ["model", "version"]


def kv_tier_families(stats):
    """stats: [((model, version), EngineStats)]."""
    hits = CounterMetricFamily(
        "trtserve_prefix_cache_tier_hits",
        "Prompt tokens found in the prefix cache, by KV tier.",
        labels=[*_LABELS, "tier"],
    )
    held = GaugeMetricFamily(
        "trtserve_kv_tier_bytes", "Bytes of KV blocks held (in use or cached), by tier.", labels=[*_LABELS, "tier"]
    )
    capacity = GaugeMetricFamily(
        "trtserve_kv_tier_capacity_bytes", "Bytes of KV blocks each tier can hold.", labels=[*_LABELS, "tier"]
    )
    for key, s in stats:
        second = s.kv_tier.hit_tokens
        hits.add_metric([*key, "1"], s.prefix_cache.hits - second)
        hits.add_metric([*key, "2"], second)
        held.add_metric([*key, "1"], (s.kv_cache.blocks_used + s.kv_cache.blocks_cached) * s.kv_cache.block_bytes)
        held.add_metric([*key, "2"], s.kv_tier.bytes)
        capacity.add_metric([*key, "1"], s.kv_cache.blocks_total * s.kv_cache.block_bytes)
        capacity.add_metric([*key, "2"], s.kv_tier.capacity_bytes)
    yield from (hits, held, capacity)
    for name, doc, field in (
        (
            "trtserve_kv_offload_spills",
            "KV blocks copied into the second tier as they were evicted.",
            "spills",
        ),
        (
            "trtserve_kv_offload_restores",
            "KV blocks copied back from the second tier on a prefix hit.",
            "restores",
        ),
        (
            "trtserve_kv_offload_refusals",
            "Second-tier blocks refused (checksum failed) and recomputed.",
            "refusals",
        ),
    ):
        c = CounterMetricFamily(name, doc, labels=_LABELS)
        for key, s in stats:
            c.add_metric(list(key), getattr(s.kv_tier, field))
        yield c
