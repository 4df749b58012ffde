"""The worker's own counters on Dynamo's /metrics (the system port): read from the engine at scrape time."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREFIX = "trtserve_dynamo_"


class _EngineCollector:
    def __init__(self, worker: Any):
        self.worker = worker  # a TrtserveWorker: its engine, hand-off server and counters

    def collect(self):
        w = self.worker
        if w.engine is None:
            return
        s = w.engine.stats()
        yield CounterMetricFamily(
            PREFIX + "prompt_tokens", "Prompt tokens looked up in the prefix cache", s.prefix_cache.queries
        )
        yield CounterMetricFamily(
            PREFIX + "prefix_hit_tokens", "Prompt tokens served by the prefix cache", s.prefix_cache.hits
        )
        yield CounterMetricFamily(
            PREFIX + "computed_prompt_tokens", "Prompt tokens computed here", s.scheduler.prompt_tokens
        )
        yield CounterMetricFamily(PREFIX + "generated_tokens", "Tokens generated here", s.scheduler.generated_tokens)
        yield CounterMetricFamily(
            PREFIX + "local_prefills", "Decode requests whose prefill KV could not be pulled", w.local_prefills
        )
        yield CounterMetricFamily(PREFIX + "kv_pulled_tokens", "Prompt tokens whose KV was pulled", w.pulled_tokens)
        yield CounterMetricFamily(
            PREFIX + "kv_pull_seconds", "Seconds spent pulling prompt KV (export, stage, read)", w.pull_seconds
        )
        yield GaugeMetricFamily(
            PREFIX + "kv_blocks_used", "KV blocks held (held prefill KV included)", s.kv_cache.blocks_used
        )
        held = w.server.outstanding if w.server is not None else 0
        yield GaugeMetricFamily(PREFIX + "kv_offers", "Prefill KV offered and not yet released", held)


def register_metrics(metrics: Any, worker: Any) -> None:
    """Bridge the collector into Dynamo's EngineMetrics handle (dynamo.common.backend.metrics)."""
    from dynamo.common.backend.metrics import register_engine_registry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector(worker))
    register_engine_registry(metrics, registry, prefix_filters=[PREFIX])
