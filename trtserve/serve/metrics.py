"""Prometheus metrics (prometheus-client), names prefixed `trtserve_`, labelled by model; request
latencies and finishes also by protocol ("http" | "grpc").

Latency histograms are observed per request by the serving layer; engine gauges and cumulative
counters are read from `Engine.stats()` at scrape time, so they are exact, not sampled.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from trtserve.engine.messages import EngineStats

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class _EngineCollector:
    def __init__(self, model: str, stats: Callable[[], EngineStats]):
        self.model, self.stats = model, stats

    def collect(self):
        s = self.stats()
        gauges = {
            "trtserve_num_requests_running": ("Sequences in the running batch.", s.running),
            "trtserve_num_requests_waiting": ("Requests waiting in the engine's queue.", s.waiting),
            "trtserve_kv_cache_usage_ratio": ("Fraction of KV blocks in use.", s.kv_utilization),
            "trtserve_kv_cache_waste_ratio": (
                "Allocated but unfilled KV token slots / allocated slots.",
                s.kv_waste,
            ),
            "trtserve_kv_cache_cached_blocks": ("Free KV blocks holding a reusable prefix.", s.kv_blocks_cached),
            "trtserve_kv_cache_free_blocks": ("Free KV blocks with no cached prefix.", s.kv_blocks_free),
            "trtserve_kv_cache_total_blocks": ("KV blocks in the pool.", s.kv_blocks_total),
        }
        for name, (doc, value) in gauges.items():
            g = GaugeMetricFamily(name, doc, labels=["model"])
            g.add_metric([self.model], value)
            yield g
        counters = {
            "trtserve_prompt_tokens": ("Prompt tokens computed (prefix-cache hits excluded).", s.prompt_tokens),
            "trtserve_generation_tokens": ("Tokens generated.", s.generated_tokens),
            "trtserve_prefix_cache_queries": ("Prompt tokens looked up in the prefix cache.", s.prefix_queries),
            "trtserve_prefix_cache_hits": ("Prompt tokens found in the prefix cache.", s.prefix_hits),
            "trtserve_num_preemptions": ("Requests preempted for lack of KV blocks.", s.preemptions),
        }
        for name, (doc, value) in counters.items():
            c = CounterMetricFamily(name, doc, labels=["model"])
            c.add_metric([self.model], value)
            yield c


_REQUEST = ["model", "protocol"]  # protocol: "http" | "grpc"


class Metrics:
    def __init__(self, model: str, stats: Callable[[], EngineStats]):
        self.model = model
        self.registry = CollectorRegistry()
        reg = self.registry

        def latency(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, _REQUEST, registry=reg, buckets=_LATENCY)

        self.ttft = latency("trtserve_time_to_first_token_seconds", "Time to first token.")
        self.itl = latency("trtserve_inter_token_latency_seconds", "Time between streamed tokens.")
        self.e2e = latency("trtserve_e2e_request_latency_seconds", "End-to-end request latency.")
        self.queue = latency("trtserve_request_queue_time_seconds", "Time from arrival to first scheduling.")
        self.finished = Counter(
            "trtserve_request_success",
            "Finished requests by finish reason.",
            [*_REQUEST, "finished_reason"],
            registry=reg,
        )
        self.http = Counter(
            "trtserve_http_requests", "HTTP responses by status code.", ["model", "status"], registry=reg
        )
        self.grpc = Counter(
            "trtserve_grpc_requests",
            "gRPC calls (and requests on a ModelStreamInfer stream) by method and status code.",
            ["model", "method", "code"],
            registry=reg,
        )
        reg.register(_EngineCollector(model, stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)
