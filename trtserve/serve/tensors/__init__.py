"""Serving tensor models (trtserve/tensor/): the infer call shared by KServe REST and gRPC, the
statistics extension's entries, and their Prometheus series.

serving.py     an infer request (decoded tensors, parameters, requested outputs) -> output arrays
statistics.py  Triton's model_stats entries for tensor models and LLM versions alike

Their Prometheus series are serve/telemetry/tensor_metrics.py's (serve/telemetry/metrics.py registers them; the
repository, which these modules read, imports metrics).
"""
