"""Start-to-ready, broken down: what a replica scaled from zero makes its first request wait for.

Measured from the interpreter's first import of trtserve (`trtserve.STARTED_AT`, the first line a
`trtserve` command runs) to the first LLM version being ready. Not the process's start: a script that
installs and builds and then `exec`s the server keeps its process, and with it the OS's start time. So
the clock leaves out whatever ran before the exec, and the interpreter's own boot before trtserve's
import (about 20 ms: site, encodings).

- imports: the packages (trtserve, the web stack, torch, tokenizers), and whatever else opening the
  engine took that the engine did not measure itself (reading tokenizer.json);
- verify: checking the engine dir's files against its manifest (sha256) before serving;
- weights: reading the weights (memory-mapped) and building the model from them (the engine's figure);
- kv_cache: allocating the KV cache (the engine's figure);
- warmup: the one short step run before the version is routed to;
- other: the rest (the server's start, the load's scheduling).

Logged once as `start-up: ...` and exported as trtserve_startup_seconds{phase}.
"""

from __future__ import annotations

import contextlib
import logging
import time

from prometheus_client.core import GaugeMetricFamily

import trtserve

log = logging.getLogger(__name__)
_verify_seconds = 0.0  # the CLI's check of the engine dir before the app exists


@contextlib.contextmanager
def verifying():
    """Time the CLI's engine-dir check (`trtserve run`), reported as the `verify` phase."""
    global _verify_seconds
    start = time.perf_counter()
    try:
        yield
    finally:
        _verify_seconds += time.perf_counter() - start


def started_at() -> float:
    """The clock's zero, as time.time(): when this interpreter first imported trtserve."""
    return trtserve.STARTED_AT


class StartupClock:
    """One per app; `ready` records the first LLM version's start-to-ready."""

    def __init__(self):
        self.started_at = started_at()  # wall clock, as time.time()
        self.app_created = time.time()
        self.phases: dict[str, float] | None = None

    def ready(self, engine_phases: dict[str, float], open_seconds: float, warmup_seconds: float) -> None:
        """engine_phases: EngineStats.startup_seconds; open_seconds: the engine factory's wall time."""
        if self.phases is not None:
            return
        total = time.time() - self.started_at
        weights, kv_cache = engine_phases.get("weights", 0.0), engine_phases.get("kv_cache", 0.0)
        before_app = self.app_created - self.started_at - _verify_seconds
        phases = {
            "imports": before_app + max(open_seconds - weights - kv_cache, 0.0),
            "verify": _verify_seconds,
            "weights": weights,
            "kv_cache": kv_cache,
            "warmup": warmup_seconds,
        }
        phases["other"] = max(total - sum(phases.values()), 0.0)
        phases["total"] = total
        self.phases = phases
        log.info(
            "start-up: ready in %.2f s (%s)",
            total,
            ", ".join(f"{k} {v:.2f} s" for k, v in phases.items() if k != "total"),
        )

    def collect(self):
        g = GaugeMetricFamily(
            "trtserve_startup_seconds",
            "Seconds from trtserve's first import to ready, by phase (total: all of them), once ready.",
            labels=["phase"],
        )
        for phase, seconds in (self.phases or {}).items():
            g.add_metric([phase], seconds)
        yield g
