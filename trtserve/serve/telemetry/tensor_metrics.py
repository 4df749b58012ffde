"""Prometheus series of every loaded tensor model, read from its ModelStatistics at scrape time
(exact, not sampled), named after Triton's nv_inference_* series: counts, cumulative queue and
compute microseconds, and executions per batch size."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily

from trtserve.tensor.stats import ModelStatistics

_LABELS = ["model", "version"]
# name -> (help, the Duration of ModelStatistics it sums, in microseconds)
_DURATIONS = {
    "trtserve_inference_request_duration_us": ("Cumulative end-to-end inference time (µs).", ("success", "fail")),
    "trtserve_inference_queue_duration_us": ("Cumulative time requests waited in the queue (µs).", ("queue",)),
    "trtserve_inference_compute_input_duration_us": ("Cumulative batch input gathering time (µs).", ("compute_input",)),
    "trtserve_inference_compute_infer_duration_us": ("Cumulative model execution time (µs).", ("compute_infer",)),
    "trtserve_inference_compute_output_duration_us": ("Cumulative output splitting time (µs).", ("compute_output",)),
}


class TensorCollector:
    def __init__(self):
        self.models: dict[tuple[str, str], ModelStatistics] = {}

    def collect(self):
        models = list(self.models.items())
        simple = {
            "trtserve_inference_count": ("Inferences (batch elements) that succeeded.", lambda s: s.inference_count),
            "trtserve_inference_exec_count": ("Model executions (one per batch).", lambda s: s.execution_count),
            "trtserve_inference_request_success": ("Inference requests that succeeded.", lambda s: s.success.count),
            "trtserve_inference_request_failure": ("Inference requests that failed.", lambda s: s.fail.count),
        }
        for name, (doc, read) in simple.items():
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            for key, s in models:
                c.add_metric(list(key), read(s))
            yield c
        for name, (doc, fields) in _DURATIONS.items():
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            for key, s in models:
                c.add_metric(list(key), sum(getattr(s, f).ns for f in fields) // 1000)
            yield c
        batches = CounterMetricFamily(
            "trtserve_inference_batch_executions", "Model executions by batch size.", labels=[*_LABELS, "batch_size"]
        )
        for key, s in models:
            with s.lock:
                sizes = [(b.batch_size, b.compute_infer.count) for b in s.batch_stats.values()]
            for size, count in sorted(sizes):
                batches.add_metric([*key, str(size)], count)
        yield batches
