"""The result table `trtserve bench` prints (rich), laid out like `vllm bench serve`'s."""

from __future__ import annotations

from rich.table import Table

from trtserve.bench.stats import METRICS

_NAMES = {
    "ttft": "Time to first token",
    "tpot": "Time per output token (excl. 1st)",
    "itl": "Inter-token latency",
    "e2el": "End-to-end latency",
}


def table(summary: dict) -> Table:
    mode = "" if summary.get("stream", True) else " (not streamed)"
    t = Table(title=f"trtserve bench: {summary['backend']}{mode} / {summary['model_id']}", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [
        ("Successful requests", f"{summary['completed']}"),
        ("Failed requests", f"{summary['failed']}"),
        ("Benchmark duration (s)", f"{summary['duration']:.2f}"),
        ("Total input tokens", f"{summary['total_input_tokens']}"),
        ("Total generated tokens", f"{summary['total_output_tokens']}"),
        ("Request throughput (req/s)", f"{summary['request_throughput']:.2f}"),
        ("Output token throughput (tok/s)", f"{summary['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{summary['total_token_throughput']:.2f}"),
    ]
    if summary.get("request_goodput") is not None:
        rows.append(("Request goodput (req/s)", f"{summary['request_goodput']:.2f}"))
    server = summary.get("server_metrics") or {}
    if server.get("spec_decode_acceptance_rate") is not None:  # speculative decoding ran: beside throughput
        rows.append(("Spec decode acceptance rate", f"{server['spec_decode_acceptance_rate']:.1%}"))
        rows.append(("Spec decode mean acceptance length", f"{server['spec_decode_mean_acceptance_length']:.2f}"))
    for k, v in rows:
        t.add_row(k, v)
    for m in METRICS:
        t.add_section()
        t.add_row(f"[bold]{_NAMES[m]}[/bold]", "")
        for stat in ("mean", "median", "p90", "p99"):
            key = f"{stat}_{m}_ms"
            if key in summary:
                t.add_row(
                    f"  {stat.capitalize() if stat in ('mean', 'median') else stat.upper()} (ms)", f"{summary[key]:.2f}"
                )
    if server := summary.get("server_metrics"):
        t.add_section()
        t.add_row("[bold]Server /metrics over the run[/bold]", "")
        t.add_row(
            "  Prefix cache hits / queries (tokens)",
            f"{server['prefix_cache_hits']:.0f} / {server['prefix_cache_queries']:.0f}",
        )
        t.add_row("  Prefix cache hit rate", f"{server['prefix_cache_hit_rate']:.1%}")
        t.add_row("  Preemptions", f"{server['preemptions']:.0f}")
        t.add_row("  Peak KV cache usage (sampled)", f"{server['peak_kv_cache_usage']:.1%}")
        t.add_row("  KV waste at that peak", f"{server['kv_cache_waste_at_peak']:.1%}")
        t.add_row(
            "  Peak running / waiting (sampled)",
            f"{server['peak_num_requests_running']:.0f} / {server['peak_num_requests_waiting']:.0f}",
        )
    return t


def tensor_table(summary: dict) -> Table:
    """A tensor model's sweep (trtserve/bench/tensor.py): one row per concurrency level."""
    t = Table(title=f"trtserve bench: {summary['backend']} / {summary['model_id']} (tensor model)")
    for name in ("Conc.", "OK", "Failed", "Infer/s", "p50 ms", "p99 ms", "Server inf.", "Execs", "Avg batch"):
        t.add_column(name, justify="right")
    for lv in summary["levels"]:
        server = lv["server_inference_count"] is not None
        t.add_row(
            str(lv["concurrency"]),
            str(lv["completed"]),
            str(lv["failed"]),
            f"{lv['inference_throughput']:.1f}",
            f"{lv['p50_latency_ms']:.2f}",
            f"{lv['p99_latency_ms']:.2f}",
            str(lv["server_inference_count"]) if server else "-",
            str(lv["server_execution_count"]) if server else "-",
            f"{lv['avg_batch_size']:.2f}" if lv["avg_batch_size"] is not None else "-",
        )
    shapes = ", ".join(f"{n} {v['datatype']}[{'x'.join(map(str, v['shape']))}]" for n, v in summary["inputs"].items())
    t.caption = f"inputs: {shapes}; latency is the client's, the batch the server's statistics over each level"
    return t
