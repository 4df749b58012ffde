"""The comparison's results as a table, the targets of issue 6, a JSON file and a latency-throughput chart.

Pure functions over plain dicts (one dict per measured point, see `Point`), so they are unit tested
without any model (tests/unit/test_compare_report.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

REFERENCE = "trtserve"  # every ratio is to the trtserve point of the same workload


class Point(TypedDict, total=False):
    peer: str  # "trtserve", "hf-static-8", "hf-continuous", "llama.cpp-f32", ...
    workload: str  # "mixed", "decode", "prefix-on", "prefix-off", "mixed@2.0" (a rate of the sweep)
    precision: str  # weights as the peer ran them: "float32", "bfloat16", "f16", "q8_0"
    request_rate: float  # requests/s offered; inf: all at once
    stats: dict  # `trtserve.bench.stats.summarize` keys (vllm bench serve names)
    extra: dict  # anything else the peer reports (decode tok/s, server metrics, ...)


# (column title, stats key, format) of the table; latencies in ms as `vllm bench serve` names them
COLUMNS = [
    ("ok/failed", None, ""),
    ("out tok/s", "output_throughput", "{:.1f}"),
    ("req/s", "request_throughput", "{:.3f}"),
    ("TTFT p50", "median_ttft_ms", "{:.0f}"),
    ("TTFT p99", "p99_ttft_ms", "{:.0f}"),
    ("TPOT p50", "median_tpot_ms", "{:.1f}"),
    ("TPOT p99", "p99_tpot_ms", "{:.1f}"),
    ("E2E p50", "median_e2el_ms", "{:.0f}"),
    ("E2E p99", "p99_e2el_ms", "{:.0f}"),
]


@dataclass(frozen=True)
class Bars:
    """The bars of the targets that differ between dense models (issue 6) and mixtures of experts (issue 47)."""

    issue: str  # whose targets, for the table's title
    roofline: str  # the roofline's name: over all the weights or over the active ones
    decode_roofline: float  # batch-1 decode tok/s / roofline
    decode_llama: float  # batch-1 decode tok/s / llama.cpp's at the same precision
    mixed_llama: float  # mixed output tok/s / llama.cpp's


DENSE = Bars("issue 6", "bandwidth roofline", 0.85, 1.2, 3.0)
MOE = Bars("issues 6 and 47", "active-bytes roofline", 0.6, 1.0, 1.0)  # issue 47: 0.6 of it, ahead of llama.cpp


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, or None when either is missing or the reference is zero."""
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


def reference_point(points: list[Point], workload: str) -> Point | None:
    return next((p for p in points if p["peer"] == REFERENCE and p["workload"] == workload), None)


def table_rows(points: list[Point]) -> list[dict]:
    """One row per point: the COLUMNS as text, plus each peer's output throughput and p99 TTFT as a
    multiple of trtserve's on the same workload ("x trtserve"; 0.5 = half of trtserve's)."""
    rows = []
    for p in points:
        s = p.get("stats", {})
        row = {"peer": p["peer"], "workload": p["workload"], "precision": p.get("precision", "")}
        for title, key, fmt in COLUMNS:
            if key is None:
                row[title] = f"{s.get('completed', 0)}/{s.get('failed', 0)}"
            else:
                row[title] = fmt.format(s[key]) if s.get(key) is not None else "-"
        ref = reference_point(points, p["workload"])
        rs = ref.get("stats", {}) if ref else {}
        for title, key in (("tput x trtserve", "output_throughput"), ("TTFT p99 x trtserve", "p99_ttft_ms")):
            r = ratio(s.get(key), rs.get(key))
            row[title] = f"{r:.2f}" if r is not None else "-"
        rows.append(row)
    return rows


def render_table(points: list[Point], title: str):
    """A rich Table of `table_rows`."""
    from rich.table import Table

    rows = table_rows(points)
    table = Table(title=title)
    if not rows:
        return table
    for col in rows[0]:
        table.add_column(col, justify="left" if col in ("peer", "workload", "precision") else "right")
    for row in rows:
        table.add_row(*row.values())
    return table


def _find(points: list[Point], peer: str, workload: str) -> Point | None:
    return next((p for p in points if p["peer"] == peer and p["workload"] == workload), None)


def _stat(point: Point | None, key: str) -> float | None:
    return None if point is None else point.get("stats", {}).get(key)


def _extra(point: Point | None, key: str) -> float | None:
    return None if point is None else point.get("extra", {}).get(key)


def _target(name: str, measured: float | None, bar: float, higher_is_better: bool = True) -> dict:
    if measured is None:
        return {"target": name, "measured": None, "bar": bar, "met": None}
    met = measured >= bar if higher_is_better else measured <= bar
    return {"target": name, "measured": round(measured, 3), "bar": bar, "met": met}


def targets(points: list[Point], llama_peer: str | None, bars: Bars = DENSE) -> list[dict]:
    """The issue's targets that this run measured, each with the measured value and whether it is met.

    `llama_peer` names the llama.cpp point at trtserve's precision (None: llama.cpp did not run); `bars`
    the model kind's (MOE for a mixture of experts). A target whose inputs were not measured has
    measured=None and met=None.
    """
    out = []
    dec = _find(points, REFERENCE, "decode")
    out.append(_target(f"batch-1 decode / {bars.roofline}", _extra(dec, "fraction_of_roofline"), bars.decode_roofline))
    if llama_peer:
        llama_dec = _find(points, llama_peer, "decode")
        out.append(
            _target(
                f"batch-1 decode tok/s / {llama_peer}",
                ratio(_extra(dec, "decode_tok_per_s"), _extra(llama_dec, "decode_tok_per_s")),
                bars.decode_llama,
            )
        )
    # weight-only formats vs the unquantized engine (issue 21's bars, against bf16) and llama.cpp's nearest type
    for quant, gguf, bar in (("w8a16", "q8_0", 1.6), ("w4a16", "q4_0", 2.2), ("w4a16+int8act", "q4_0", 2.2)):
        mine, theirs = _find(points, f"{REFERENCE}-{quant}", "decode"), _find(points, f"llama.cpp-{gguf}", "decode")
        if mine and dec:
            got = ratio(_extra(mine, "decode_tok_per_s"), _extra(dec, "decode_tok_per_s"))
            out.append(_target(f"batch-1 decode tok/s, {quant} / {dec['precision']}", got, bar))
        if mine and theirs:
            got = ratio(_extra(mine, "decode_tok_per_s"), _extra(theirs, "decode_tok_per_s"))
            out.append(_target(f"batch-1 decode tok/s, {quant} / llama.cpp-{gguf}", got, 1.0))
    mixed = _find(points, REFERENCE, "mixed")
    hf8 = _find(points, "hf-static-8", "mixed")
    out.append(
        _target(
            "mixed output tok/s / hf-static-8",
            ratio(_stat(mixed, "output_throughput"), _stat(hf8, "output_throughput")),
            10.0,
        )
    )
    if llama_peer:
        llama_mixed = _find(points, llama_peer, "mixed")
        out.append(
            _target(
                f"mixed output tok/s / {llama_peer}",
                ratio(_stat(mixed, "output_throughput"), _stat(llama_mixed, "output_throughput")),
                bars.mixed_llama,
            )
        )
        out.append(
            _target(
                f"mixed p99 TTFT / {llama_peer}'s (lower is better)",
                ratio(_stat(mixed, "p99_ttft_ms"), _stat(llama_mixed, "p99_ttft_ms")),
                1.0,
                higher_is_better=False,
            )
        )
    on, off = _find(points, REFERENCE, "prefix-on"), _find(points, REFERENCE, "prefix-off")
    out.append(
        _target("prefix p50 TTFT off / on", ratio(_stat(off, "median_ttft_ms"), _stat(on, "median_ttft_ms")), 10.0)
    )
    out.append(_target("prefix outputs identical on vs off (fraction)", _extra(on, "identical_to_off"), 1.0))
    waste = (_stat(mixed, "server_metrics") or {}).get("kv_cache_waste_at_peak")  # trtserve's /metrics
    out.append(_target("KV waste at peak (mixed)", waste, 0.04, higher_is_better=False))
    return out


def curve(points: list[Point], peer: str) -> list[tuple[float, float, float]]:
    """(output tok/s, median TTFT ms, p99 E2E ms) of a peer's mixed-workload points, by throughput."""
    pts = []
    for p in points:
        if p["peer"] != peer or not p["workload"].startswith("mixed"):
            continue
        s = p.get("stats", {})
        if s.get("output_throughput") is not None and s.get("median_ttft_ms") is not None:
            pts.append((s["output_throughput"], s["median_ttft_ms"], s.get("p99_e2el_ms") or 0.0))
    return sorted(pts)


def save_json(path: Path, conditions: dict, points: list[Point], target_rows: list[dict]) -> None:
    path.write_text(json.dumps({"conditions": conditions, "points": points, "targets": target_rows}, indent=2))


def save_chart(path: Path, points: list[Point], title: str) -> bool:
    """Latency vs throughput of every peer over the mixed workload's request rates, as a PNG.

    Returns False (and writes nothing) when matplotlib is missing or there is nothing to plot.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    peers = sorted({p["peer"] for p in points})
    curves = {peer: curve(points, peer) for peer in peers}
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for peer, pts in curves.items():
        xs = [x for x, _, _ in pts]
        ax1.plot(xs, [y for _, y, _ in pts], marker="o", label=peer)
        ax2.plot(xs, [e for _, _, e in pts], marker="o", label=peer)
    for ax, ylabel in ((ax1, "median TTFT (ms)"), (ax2, "p99 end-to-end latency (ms)")):
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def decode_tok_per_s(requests: list[tuple[int, float, float]]) -> float | None:
    """Median decode rate of batch-1 requests given as (output tokens, TTFT s, E2E s): the tokens after
    the first over the time after the first, so prefill is left out."""
    rates = sorted((n - 1) / (e2e - ttft) for n, ttft, e2e in requests if n > 1 and e2e > ttft)
    if not rates:
        return None
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


def render_targets(rows: list[dict], bars: Bars = DENSE):
    """A rich Table of `targets`: measured, bar, met (yes / NO / not measured)."""
    from rich.table import Table

    table = Table(title=f"{bars.issue} targets (trtserve)")
    for col in ("target", "measured", "bar", "met"):
        table.add_column(col)
    for r in rows:
        met = "not measured" if r["met"] is None else ("yes" if r["met"] else "NO")
        table.add_row(r["target"], "-" if r["measured"] is None else f"{r['measured']:g}", f"{r['bar']:g}", met)
    return table
