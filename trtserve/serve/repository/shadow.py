"""Shadow traffic: a share of a model's greedy requests is replayed on a shadow version after the
primary has answered (so it never delays it), at the lowest priority, and dropped when the shadow
version is busy. Only the primary's answer reaches the client; each pair records whether the
greedy outputs agree, the first token where they diverge, and each side's time to first token."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from dataclasses import dataclass, field

from trtserve.engine.request_options import RequestOptions
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.telemetry.metrics import Metrics

log = logging.getLogger(__name__)
PRIORITY = -1e9  # below every client priority
MAX_QUEUED = 2  # shadow requests waiting on the shadow version before new ones are dropped


@dataclass
class Pair:
    agree: bool
    first_divergence: int | None  # index of the first differing output token; None when they agree
    primary_ttft: float | None  # seconds
    shadow_ttft: float | None


@dataclass
class ShadowStats:
    pairs: int = 0
    agreed: int = 0
    dropped: int = 0  # skipped because the shadow version was busy or not ready
    recent: deque[Pair] = field(default_factory=lambda: deque(maxlen=20))

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.pairs if self.pairs else None

    def summary(self) -> dict:
        return {
            "pairs": self.pairs,
            "agreement_rate": self.agreement,
            "dropped": self.dropped,
            "recent": [vars(p) for p in self.recent],
        }


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class ShadowMirror:
    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self.stats: dict[tuple[str, int], ShadowStats] = {}
        self.tasks: set[asyncio.Task] = set()

    def reset(self, model: str, version: int) -> None:
        self.stats[(model, version)] = ShadowStats()

    def offer(self, run, target: ModelVersion, fraction: float) -> None:
        """Called when a primary run finished OK: maybe replay it on `target`."""
        params = run.req.params
        if not params.greedy or params.n != 1 or random.random() >= fraction:
            return  # agreement is only defined for one greedy sequence
        stats = self.stats.setdefault((target.model, target.version), ShadowStats())
        svc = target.service
        if not target.ready or svc is None or svc.admission.queued_requests >= MAX_QUEUED:
            stats.dropped += 1
            return
        task = asyncio.ensure_future(self._mirror(run, target, stats))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _mirror(self, run, target: ModelVersion, stats: ShadowStats) -> None:
        req = run.req
        try:
            options = RequestOptions(client_id=f"shadow-{req.request_id}", priority=PRIORITY)
            shadow = target.service.start(list(req.prompt_token_ids), req.params, options, internal=True)
            out = await shadow.collect()
        except Exception as err:  # the shadow's failure is the shadow's business, never the client's
            log.warning("shadow request on %s failed: %s", target.name, err)
            stats.dropped += 1
            return
        mine, theirs = list(run.output.outputs[0].token_ids), list(out.outputs[0].token_ids)
        diverge = first_divergence(mine, theirs)
        pair = Pair(diverge is None, diverge, run.ttft, shadow.ttft)
        stats.pairs += 1
        stats.agreed += pair.agree
        stats.recent.append(pair)
        self.metrics.shadow.labels(target.model, str(target.version), str(pair.agree).lower()).inc()
        self.metrics.routed.labels(target.model, str(target.version), "shadow").inc()
