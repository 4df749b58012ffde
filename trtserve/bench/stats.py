"""Summary statistics of a run, with the keys and definitions of `vllm bench serve`.

Per successful request:
    TTFT  = time from sending to the first token-carrying chunk
    TPOT  = (E2E latency - TTFT) / (output tokens - 1), only for requests with more than one token
    ITL   = every gap between successive token-carrying chunks, pooled over all requests
    E2EL  = time from sending to the end of the stream
Throughputs divide by the benchmark duration. Goodput counts the requests that meet every SLO
given (ttft, tpot, e2el, in ms; a one-token request's TPOT counts as 0), per second.
Latencies are reported in ms: mean, median, std, and p90 / p99 (numpy's linear interpolation).
"""

from __future__ import annotations

import numpy as np

from trtserve.bench.client import BenchRun

PERCENTILES = (90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_KEYS = ("ttft", "tpot", "e2el")


def describe(name: str, values_s: list[float], percentiles=PERCENTILES) -> dict[str, float]:
    ms = np.asarray(values_s or [0.0], dtype=np.float64) * 1000.0
    out = {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = float(np.percentile(ms, p))
    return out


def summarize(run: BenchRun, slo: dict[str, float] | None = None, percentiles=PERCENTILES) -> dict:
    """The vLLM-keyed summary of `run`; `slo` maps ttft/tpot/e2el to milliseconds."""
    slo = dict(slo or {})
    if unknown := set(slo) - set(SLO_KEYS):
        raise ValueError(f"unknown SLO {', '.join(sorted(unknown))}; use {', '.join(SLO_KEYS)}")
    ok = [r for r in run.results if r.success]
    ttfts = [r.ttft for r in ok]
    e2els = [r.latency for r in ok]
    all_tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0 for r in ok]
    tpots = [t for t, r in zip(all_tpots, ok, strict=True) if r.output_tokens > 1]
    itls = [gap for r in ok for gap in r.itl]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    dur = run.duration
    out: dict = {
        "backend": run.backend,
        "model_id": run.model,
        "duration": dur,
        "completed": len(ok),
        "failed": len(run.results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur if dur > 0 else 0.0,
        "request_goodput": None,
        "output_throughput": total_out / dur if dur > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / dur if dur > 0 else 0.0,
        "request_rate": run.request_rate,
        "burstiness": run.burstiness,
        "max_concurrency": run.max_concurrency,
        "stream": run.stream,
    }
    if slo:
        per_metric = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
        good = sum(all(per_metric[k][i] * 1000.0 <= limit for k, limit in slo.items()) for i in range(len(ok)))
        out["request_goodput"] = good / dur if dur > 0 else 0.0
        out["goodput_slo_ms"] = slo
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        out.update(describe(name, values, percentiles))
    out["input_lens"] = [r.prompt_len for r in run.results]
    out["output_lens"] = [r.output_tokens if r.success else 0 for r in run.results]
    out["generated_texts"] = [r.text for r in run.results]
    out["errors"] = [r.error for r in run.results]
    if run.server_metrics is not None:
        out["server_metrics"] = dict(run.server_metrics)
    return out
