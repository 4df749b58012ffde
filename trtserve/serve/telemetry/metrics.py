"""Prometheus metrics (prometheus-client), names prefixed `trtserve_`, labelled by model; request
latencies and finishes also by protocol ("http" | "grpc").

Latency histograms are observed per request by the serving layer; engine gauges and cumulative
counters are read from `Engine.stats()` at scrape time, so they are exact, not sampled. The
process_* series are prometheus-client's ProcessCollector's plus serve/telemetry/utilisation.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from trtserve.engine.stats import EngineStats
from trtserve.serve.load import LoadCollector, LoadTracker
from trtserve.serve.telemetry.kv_tier_metrics import kv_tier_families
from trtserve.serve.telemetry.pooling_metrics import PoolingMetrics
from trtserve.serve.telemetry.tensor_metrics import TensorCollector
from trtserve.serve.telemetry.utilisation import UtilisationCollector, snapshot
from trtserve.tensor.stats import ModelStatistics

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class _EngineCollector:
    """Every loaded engine's gauges and counters, one sample per (model, version), read at scrape time."""

    def __init__(self):
        self.engines: dict[tuple[str, str], Callable[[], EngineStats]] = {}

    def collect(self):
        stats = [(key, s()) for key, s in list(self.engines.items())]
        gauges = {
            "trtserve_num_requests_running": ("Sequences in the running batch.", "scheduler.running"),
            "trtserve_num_requests_waiting": ("Requests waiting in the engine's queue.", "scheduler.waiting"),
            "trtserve_kv_cache_usage_ratio": ("Fraction of KV blocks in use.", "kv_cache.utilization"),
            "trtserve_kv_cache_waste_ratio": (
                "Allocated but unfilled KV token slots / allocated slots.",
                "kv_cache.waste",
            ),
            "trtserve_kv_cache_cached_blocks": ("Free KV blocks holding a reusable prefix.", "kv_cache.blocks_cached"),
            "trtserve_kv_cache_free_blocks": ("Free KV blocks with no cached prefix.", "kv_cache.blocks_free"),
            "trtserve_kv_cache_total_blocks": ("KV blocks in the pool.", "kv_cache.blocks_total"),
        }
        yield from _per_engine(GaugeMetricFamily, gauges, stats)
        counters = {
            "trtserve_prompt_tokens": (
                "Prompt tokens computed (prefix-cache hits excluded).",
                "scheduler.prompt_tokens",
            ),
            "trtserve_generation_tokens": ("Tokens generated.", "scheduler.generated_tokens"),
            "trtserve_prefix_cache_queries": ("Prompt tokens looked up in the prefix cache.", "prefix_cache.queries"),
            "trtserve_prefix_cache_hits": ("Prompt tokens found in the prefix cache.", "prefix_cache.hits"),
            "trtserve_num_preemptions": ("Requests preempted for lack of KV blocks.", "scheduler.preemptions"),
            "trtserve_prefix_cache_invalidations": ("POST /v1/cache/invalidate calls.", "prefix_cache.invalidations"),
            "trtserve_prefix_cache_version_refusals": (
                "Prefix lookups whose prompt was cached only under another context_version.",
                "prefix_cache.version_refusals",
            ),
        }
        yield from _per_engine(CounterMetricFamily, counters, stats)
        busy = CounterMetricFamily(
            "trtserve_engine_busy_seconds",
            "Seconds the engine spent executing steps; rate() is the busy fraction.",
            labels=["model", "version"],
        )
        for key, s in stats:
            if s.busy_seconds is not None:  # a backend that cannot measure it has no sample, not a zero
                busy.add_metric(list(key), s.busy_seconds)
        yield busy
        yield from _by_namespace(stats)
        yield from _by_adapter(stats)
        yield from _spec_decode(stats)
        yield from kv_tier_families(stats)  # prefix hits by tier, the second tier's traffic and bytes
        yield from _vision(stats)


def _per_engine(family, table: dict[str, tuple[str, str]], stats, part=lambda s: s):
    """One metric family per `name: (doc, field)` of `table`, one sample per engine: its stats' `field`
    (dotted, e.g. "scheduler.running"; of `part(stats)`, e.g. the speculative counts)."""
    for name, (doc, field) in table.items():
        f = family(name, doc, labels=["model", "version"])
        for key, s in stats:
            f.add_metric(list(key), attrgetter(field)(part(s)))
        yield f


def _vision(stats):
    """The vision encoder and its cache (docs/vision.md): 0 on a text-only model."""
    counters = {
        "trtserve_vision_images_encoded": ("Images run through the vision encoder.", "vision.encoded"),
        "trtserve_vision_encoder_cache_hits": (
            "Image lookups the vision encoder cache answered (no encoding).",
            "vision.cache_hits",
        ),
        "trtserve_vision_encoder_cache_misses": (
            "Image lookups the vision encoder cache missed (encoded).",
            "vision.cache_misses",
        ),
    }
    yield from _per_engine(CounterMetricFamily, counters, stats)
    gauges = {
        "trtserve_vision_encoder_cache_images": ("Images the vision encoder cache holds.", "vision.cached_images"),
        "trtserve_vision_encoder_cache_bytes": (
            "Bytes of projected image rows the vision encoder cache holds.",
            "vision.cached_bytes",
        ),
    }
    yield from _per_engine(GaugeMetricFamily, gauges, stats)


def _by_namespace(stats):
    """Prefix-cache hit and missed prompt tokens by cache_namespace ("default": none named; at most
    64 names, the rest as "_other", so clients cannot grow the series without bound)."""
    for name, doc, i in (
        ("trtserve_prefix_cache_namespace_hits", "Prompt tokens found in the prefix cache, by namespace.", 0),
        ("trtserve_prefix_cache_namespace_misses", "Prompt tokens looked up but not cached, by namespace.", 1),
    ):
        c = CounterMetricFamily(name, doc, labels=["model", "version", "namespace"])
        for key, s in stats:
            for namespace, counts in s.prefix_cache.by_namespace.items():
                c.add_metric([*key, namespace], counts[i])
        yield c


def _by_adapter(stats):
    """LoRA adapters: the adapter cache's counters, and each adapter's requests and tokens (label
    `adapter`: its name; only adapters an operator loaded, so the series stay bounded)."""
    cache = {
        "trtserve_lora_adapter_loads": (
            "LoRA adapters loaded into memory (again after an eviction).",
            "adapters.loads",
        ),
        "trtserve_lora_adapter_evictions": ("LoRA adapters evicted from memory (LRU).", "adapters.evictions"),
        "trtserve_lora_adapter_hits": ("Times a request's LoRA adapter was found in memory.", "adapters.hits"),
    }
    yield from _per_engine(CounterMetricFamily, cache, stats)
    per = {
        "trtserve_lora_requests": ("Requests run under each LoRA adapter.", "requests"),
        "trtserve_lora_prompt_tokens": ("Prompt tokens computed under each LoRA adapter.", "prompt_tokens"),
        "trtserve_lora_generation_tokens": ("Tokens generated under each LoRA adapter.", "generated_tokens"),
    }
    for name, (doc, field) in per.items():
        c = CounterMetricFamily(name, doc, labels=["model", "version", "adapter"])
        for key, s in stats:
            for adapter, counts in s.adapters.by_adapter.items():
                c.add_metric([*key, adapter], getattr(counts, field))
        yield c


def _spec_decode(stats):
    """Speculative decoding, with vLLM's names and definitions (rate(accepted) / rate(draft_tokens)
    is the acceptance rate; 1 + rate(accepted) / rate(drafts) the mean acceptance length)."""
    counters = {
        "trtserve_spec_decode_num_drafts": ("Verification passes that carried proposed tokens.", "drafts"),
        "trtserve_spec_decode_num_draft_tokens": ("Tokens proposed for verification.", "draft_tokens"),
        "trtserve_spec_decode_num_accepted_tokens": ("Proposed tokens the target model kept.", "accepted_tokens"),
    }
    yield from _per_engine(CounterMetricFamily, counters, stats, lambda s: s.spec)
    per = CounterMetricFamily(
        "trtserve_spec_decode_num_accepted_tokens_per_pos",
        "Drafts whose proposed token at this position (from 0) was kept.",
        labels=["model", "version", "position"],
    )
    for key, s in stats:
        for position, n in enumerate(s.spec.accepted_per_position):
            per.add_metric([*key, str(position)], n)
    yield per


# protocol: "http" | "grpc"; frontend: the API it came by (serve/context.py's FRONTENDS, "kserve", "other")
_REQUEST = ["model", "version", "protocol", "frontend"]


class Metrics:
    """One registry for the server; every loaded version adds its engine with `add_engine`."""

    def __init__(self, model: str, stats: Callable[[], EngineStats] | None = None, version: str = "1"):
        self.model = model  # the default model: the label of series no request names a model for
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
            "trtserve_http_requests", "HTTP responses by status code.", ["model", "version", "status"], registry=reg
        )
        self.grpc = Counter(
            "trtserve_grpc_requests",
            "gRPC calls (and requests on a ModelStreamInfer stream) by method and status code.",
            ["model", "version", "method", "code"],
            registry=reg,
        )
        self.routed = Counter(
            "trtserve_routed_requests",
            "Requests by the version that answered and the routing decision (weighted, pinned, label, shadow).",
            ["model", "version", "decision"],
            registry=reg,
        )
        self.shadow = Counter(
            "trtserve_shadow_comparisons",
            "Shadow pairs compared by whether the greedy outputs agreed.",
            ["model", "version", "agree"],
            registry=reg,
        )
        self.rollbacks = Counter("trtserve_rollbacks", "Routing rollbacks by cause.", ["model", "cause"], registry=reg)
        self.pooling = PoolingMetrics(reg)  # pooling calls by task (serve/telemetry/pooling_metrics.py)
        self._engines = _EngineCollector()
        reg.register(self._engines)
        self._tensors = (
            TensorCollector()
        )  # tensor models' inference / execution series (serve/telemetry/tensor_metrics.py)
        reg.register(self._tensors)
        ProcessCollector(registry=reg)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds
        self._utilisation = UtilisationCollector(self._engine_stats)
        reg.register(self._utilisation)
        if stats is not None:
            self.add_engine(model, version, stats)

    def add_engine(self, model: str, version: str, stats: Callable[[], EngineStats]) -> None:
        self._engines.engines[(model, version)] = stats

    def remove_engine(self, model: str, version: str, stats: Callable[[], EngineStats] | None = None) -> None:
        """Forget a version's engine (only if it is still `stats`' engine, when given)."""
        if stats is None or self._engines.engines.get((model, version)) == stats:
            self._engines.engines.pop((model, version), None)

    def add_tensor(self, model: str, version: str, stats: ModelStatistics) -> None:
        self._tensors.models[(model, version)] = stats

    def remove_tensor(self, model: str, version: str, stats: ModelStatistics) -> None:
        if self._tensors.models.get((model, version)) is stats:
            self._tensors.models.pop((model, version), None)

    def _engine_stats(self) -> dict[tuple[str, str], EngineStats]:
        return {key: s() for key, s in list(self._engines.engines.items())}

    def utilisation(self) -> dict:
        """serve/telemetry/utilisation.py's `snapshot` of this server: the process, every loaded engine, the GPUs."""
        return snapshot(self._engine_stats(), self._utilisation.window)

    def add_collector(self, collector) -> None:
        """A custom collector (the repository's version states, shadow agreement)."""
        self.registry.register(collector)

    def watch_load(self, tracker: LoadTracker) -> None:
        """Export the autoscaling signals (serve/load.py) of this model."""
        self.registry.register(LoadCollector(self.model, tracker))

    def render(self) -> bytes:
        return generate_latest(self.registry)
