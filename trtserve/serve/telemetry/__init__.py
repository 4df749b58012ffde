"""What the server says about itself: Prometheus series, utilisation, statistics, start-up.

metrics.py          the Metrics registry every front end records into (/metrics)
tensor_metrics.py   tensor models' inference / execution series
kv_tier_metrics.py  the KV tiers' series
utilisation.py      process, engine and GPU utilisation signals
statistics.py       per-version request statistics (Triton's model_stats)
startup.py          the start-up clock and its phases
"""
