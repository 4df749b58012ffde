"""The server's own view of a run, when it is trtserve: /metrics counter deltas and sampled peaks.

Counters (prefix-cache queries and hits, preemptions, computed prompt and generated tokens, speculative
decoding's drafts and accepted tokens) are exact differences between a scrape before and after the
run. Peaks (KV cache usage, running and waiting requests) are the highest values seen by polling
/metrics during the run (every 10 ms until a running request shows, then every 0.1 s), so they are
lower bounds.
"""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {
    "prefix_cache_queries": "trtserve_prefix_cache_queries_total",
    "prefix_cache_hits": "trtserve_prefix_cache_hits_total",
    "preemptions": "trtserve_num_preemptions_total",
    "prompt_tokens_computed": "trtserve_prompt_tokens_total",
    "generation_tokens": "trtserve_generation_tokens_total",
    "spec_decode_num_drafts": "trtserve_spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens": "trtserve_spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens": "trtserve_spec_decode_num_accepted_tokens_total",
}
GAUGES = {
    "peak_kv_cache_usage": "trtserve_kv_cache_usage_ratio",
    "peak_num_requests_running": "trtserve_num_requests_running",
    "peak_num_requests_waiting": "trtserve_num_requests_waiting",
}

WASTE = "trtserve_kv_cache_waste_ratio"  # reported as `kv_cache_waste_at_peak`


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value summed over label sets}."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def deltas(before: dict[str, float], after: dict[str, float], peaks: dict[str, float]) -> dict[str, float | None]:
    """The report: counter differences, the prefix hit rate over this run, and the sampled peaks."""
    report = {key: after.get(name, 0.0) - before.get(name, 0.0) for key, name in COUNTERS.items()}
    q = report["prefix_cache_queries"]
    report["prefix_cache_hit_rate"] = report["prefix_cache_hits"] / q if q else 0.0
    # speculative decoding, with vLLM's definitions (None: the run made no proposals)
    drafts, proposed = report["spec_decode_num_drafts"], report["spec_decode_num_draft_tokens"]
    accepted = report["spec_decode_num_accepted_tokens"]
    report["spec_decode_acceptance_rate"] = accepted / proposed if proposed else None
    report["spec_decode_mean_acceptance_length"] = 1 + accepted / drafts if drafts else None
    report.update({key: peaks.get(name, 0.0) for key, name in GAUGES.items()})
    report["kv_cache_waste_at_peak"] = peaks.get(WASTE, 0.0)
    return report


class MetricsWatcher:
    """Scrapes `{base_url}/metrics` before, during (every `interval` s) and after a run.

    A scrape is not free for the server it measures: rendering /metrics takes its event loop ~2 ms,
    which on a 2-core CPU also stalls the engine's OpenMP threads, so frequent scrapes slow the run
    they measure (docs/performance.md). Peaks need no finer sampling than a
    Prometheus server would take, so once a request is seen running, one scrape a second."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, interval: float = 1.0):
        self.client, self.url, self.interval = client, base_url.rstrip("/") + "/metrics", interval
        self.before: dict[str, float] | None = None
        self.peaks: dict[str, float] = {}
        self._task: asyncio.Task | None = None

    async def _scrape(self) -> dict[str, float] | None:
        try:
            resp = await self.client.get(self.url, timeout=5.0)
        except httpx.HTTPError:
            return None
        if resp.status_code != 200:
            return None
        try:
            values = parse_metrics(resp.text)
        except ValueError:  # not Prometheus text
            return None
        return values if COUNTERS["prefix_cache_queries"] in values else None

    def _peak(self, values: dict[str, float]) -> None:
        usage = GAUGES["peak_kv_cache_usage"]
        if WASTE in values and values.get(usage, 0.0) >= self.peaks.get(usage, 0.0):
            self.peaks[WASTE] = values[WASTE]  # the waste in the sample with the highest usage so far
        for name in GAUGES.values():
            if name in values:
                self.peaks[name] = max(self.peaks.get(name, 0.0), values[name])

    async def _poll(self) -> None:
        running = GAUGES["peak_num_requests_running"]
        while True:
            if (values := await self._scrape()) is not None:
                self._peak(values)
            # Every 10 ms until a running request has been seen: a short run on a fast engine can end
            # inside one interval, and its peaks would read 0.
            await asyncio.sleep(self.interval if self.peaks.get(running) else min(self.interval, 0.01))

    async def start(self) -> bool:
        """Take the first scrape; False (and nothing more happens) when the server is not trtserve."""
        self.before = await self._scrape()
        if self.before is None:
            return False
        self._task = asyncio.ensure_future(self._poll())
        return True

    async def _settled(self, wait: float = 2.0) -> dict[str, float] | None:
        """The after-run scrape, once the engine reports no running or waiting request.

        The engine publishes its counters after each step, so a client can see its last token a
        moment before the counters include it; an idle snapshot is final (other clients aside).
        """
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            values = await self._scrape()
            idle = values is not None and not values.get(GAUGES["peak_num_requests_running"], 0)
            idle = idle and not values.get(GAUGES["peak_num_requests_waiting"], 0)
            if idle or values is None or asyncio.get_running_loop().time() > deadline:
                return values
            await asyncio.sleep(0.02)

    async def stop(self) -> dict[str, float] | None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.before is None:
            return None
        after = await self._settled()
        if after is None:
            return None
        self._peak(after)
        return deltas(self.before, after, self.peaks)
