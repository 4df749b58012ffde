"""Pooling requests' series (docs/pooling.md): /v1/rerank, /v1/score, /classify, /pooling, /v1/embeddings
on a pooling model and KServe infer on one, labelled by the `task` the call asked for (rerank, score,
classify, embed, pooling), beside the model and the version that answered."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_LABELS = ["model", "version", "task"]
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class PoolingMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter(
            "trtserve_pooling_requests",
            "Pooling calls by task and outcome (ok: answered; error: refused or failed).",
            [*_LABELS, "outcome"],
            registry=registry,
        )
        self.inputs = Counter(
            "trtserve_pooling_inputs", "Texts, pairs or documents the pooling calls held.", _LABELS, registry=registry
        )
        self.tokens = Counter(
            "trtserve_pooling_prompt_tokens",
            "Prompt tokens of the pooling calls (tensor models, which tokenize inside, count 0).",
            _LABELS,
            registry=registry,
        )
        self.latency = Histogram(
            "trtserve_pooling_request_latency_seconds",
            "Pooling calls' latency, from routing to the answer.",
            _LABELS,
            registry=registry,
            buckets=_LATENCY,
        )

    def observe(self, model: str, version: str, task: str, inputs: int, tokens: int, seconds: float, ok: bool):
        labels = (model, version, task)
        self.requests.labels(*labels, "ok" if ok else "error").inc()
        if ok:
            self.inputs.labels(*labels).inc(inputs)
            self.tokens.labels(*labels).inc(tokens)
            self.latency.labels(*labels).observe(seconds)
