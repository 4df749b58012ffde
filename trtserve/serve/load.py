"""Signals made for autoscalers (Kubernetes HPA, KEDA, Ray Serve): how much work is waiting and how
close the server is to refusing it. CPU utilisation says little about an LLM server (a full batch and
an idle one can burn the same cores), so scale on these instead.

Each is a Prometheus gauge on /metrics, labelled by model (serve/telemetry/metrics.py registers them):

- `trtserve_queue_requests`: requests admitted but not yet producing their first token (waiting in
  the admission queue or the engine's). Scale out when it stays above ~0 per replica: KEDA
  `threshold` is the target average per replica (e.g. 4), `activationThreshold` the value above which
  a deployment scaled to zero wakes up (e.g. 0: any waiting request).
- `trtserve_queue_tokens`: prompt tokens of those requests, i.e. prefill work not yet done (prefix
  cache hits are still counted, so it is an upper bound). Better than the request count when prompt
  lengths vary a lot.
- `trtserve_tokens_per_second{kind="prompt"|"generation"}`: tokens computed per second, a rolling rate
  over the last `WINDOW` seconds (or since the previous observation, if that is longer), so an HPA can
  use it without a PromQL `rate()`. Target: the throughput one replica sustains at an acceptable
  latency (measure it with `trtserve bench`).
- `trtserve_kv_cache_usage_ratio` (already exported): KV blocks in use / total; near 1 the engine
  preempts, so it is a late but hard signal.
- `trtserve_load`: max of the ratios below, each 1.0 at a limit; above 1 means work is waiting past
  the batch. 0 idle, ~0.7 comfortable, >= 1 saturated. A good single HPA target (e.g. 0.8):
    in-flight requests / engine batch size (when known),
    queued requests / max_queued_requests and queued tokens / max_queued_tokens (429 at 1.0),
    KV usage.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily

from trtserve.engine.stats import EngineStats
from trtserve.serve.admission import Admission

WINDOW = 10.0  # seconds the tokens-per-second rate is averaged over


@dataclass(frozen=True)
class LoadSignals:
    queue_requests: int  # admitted, no token yet
    queue_tokens: int  # their prompt tokens (prefill not yet done)
    prompt_tokens_per_s: float  # prompt tokens computed per second, rolling
    generation_tokens_per_s: float  # tokens generated per second, rolling
    kv_usage: float  # KV blocks used / total, in [0, 1]
    load: float  # in [0, 1+]: closeness to the admission and batch limits (module docstring)


class TokenRate:
    """Rolling rate of two cumulative counters: samples kept for WINDOW seconds plus one older anchor,
    so a caller that observes rarely (a 30 s scrape) still gets the rate since its last look."""

    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic):
        self.window, self.clock = window, clock
        self.samples: deque[tuple[float, int, int]] = deque()  # (time s, prompt tokens, generated tokens)

    def observe(self, prompt: int, generated: int) -> tuple[float, float]:
        now = self.clock()
        self.samples.append((now, prompt, generated))
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.window:
            self.samples.popleft()  # samples[0] stays the newest one at or before the window's start
        t0, p0, g0 = self.samples[0]
        dt = now - t0
        if dt <= 0:
            return 0.0, 0.0
        return (prompt - p0) / dt, (generated - g0) / dt


class LoadTracker:
    """Reads the engine's stats and the admission gate; one per served model. batch_size: the
    sequences the engine runs at once (Engine.info.max_batch_size); None leaves that term out."""

    def __init__(self, stats: Callable[[], EngineStats], admission: Admission, batch_size: int | None = None):
        self.stats, self.admission, self.batch_size = stats, admission, batch_size
        self.rate = TokenRate()

    def signals(self) -> LoadSignals:
        s, gate = self.stats(), self.admission
        prompt_rate, gen_rate = self.rate.observe(s.scheduler.prompt_tokens, s.scheduler.generated_tokens)
        ratios = [
            gate.queued_requests / gate.max_requests,
            gate.queued_tokens / gate.max_tokens,
            s.kv_cache.utilization,
        ]
        if self.batch_size:
            ratios.append(gate.in_flight / self.batch_size)
        return LoadSignals(
            queue_requests=gate.queued_requests,
            queue_tokens=gate.queued_tokens,
            prompt_tokens_per_s=prompt_rate,
            generation_tokens_per_s=gen_rate,
            kv_usage=s.kv_cache.utilization,
            load=max(ratios),
        )


# metric name -> help text, read by serve/telemetry/metrics.py and by the manifest tests (deploy/keda/)
LOAD_METRICS = {
    "trtserve_queue_requests": "Requests admitted but not yet producing a token (autoscaling: queue depth).",
    "trtserve_queue_tokens": "Prompt tokens of requests not yet producing a token (prefill work waiting).",
    "trtserve_tokens_per_second": "Tokens computed per second by kind (prompt|generation), rolling over 10 s.",
    "trtserve_load": "Closeness to the admission and batch limits: 0 idle, 1 at a limit, above 1 saturated.",
}


class LoadCollector:
    """The gauges above for one model, computed at scrape time (registered by serve/telemetry/metrics.py)."""

    def __init__(self, model: str, tracker: LoadTracker):
        self.model, self.tracker = model, tracker

    def collect(self):
        s = self.tracker.signals()
        for name, value in (
            ("trtserve_queue_requests", s.queue_requests),
            ("trtserve_queue_tokens", s.queue_tokens),
            ("trtserve_load", s.load),
        ):
            g = GaugeMetricFamily(name, LOAD_METRICS[name], labels=["model"])
            g.add_metric([self.model], value)
            yield g
        rate = GaugeMetricFamily(
            "trtserve_tokens_per_second", LOAD_METRICS["trtserve_tokens_per_second"], labels=["model", "kind"]
        )
        rate.add_metric([self.model, "prompt"], s.prompt_tokens_per_s)
        rate.add_metric([self.model, "generation"], s.generation_tokens_per_s)
        yield rate
