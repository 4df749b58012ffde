"""What watches live traffic: the shadow mirror, the canary guard, and the repository's own
series on /metrics (versions by state, shadow agreement)."""

from __future__ import annotations

import logging
from collections import deque

from prometheus_client.core import GaugeMetricFamily

from trtserve.serve.repository import operations
from trtserve.serve.repository.guard import parse_rules, verdict
from trtserve.serve.repository.policy import Guard
from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.shadow import ShadowMirror
from trtserve.serve.repository.version import ModelVersion, Outcome, State

log = logging.getLogger(__name__)


class GuardWatch:
    """Outcomes of the canary and of stable since the current guard was set, per model."""

    def __init__(self, repo: Repository):
        self.repo = repo
        self.windows: dict[str, tuple[Guard, deque[Outcome], deque[Outcome]]] = {}
        self.last: dict[str, str] = {}  # model -> the last guard verdict, for `repo status`

    def __call__(self, mv: ModelVersion, run, ok: bool) -> None:
        m = self.repo.models[mv.model]
        guard = m.policy.guard
        if guard is None:
            return
        current = self.windows.get(m.name)
        if current is None or current[0] is not guard:
            current = (guard, deque(maxlen=guard.window), deque(maxlen=guard.window))
            self.windows[m.name] = current
        _, canary, stable = current
        outcome = Outcome(ok, run.ttft)
        if mv.version == guard.version:
            canary.append(outcome)
        elif mv.version == m.policy.labels.get("stable"):
            stable.append(outcome)
        if mv.version != guard.version or len(canary) < guard.window:
            return
        why = verdict(parse_rules(guard.rules), list(canary), list(stable))
        if why is None:
            self.last[m.name] = f"passing over the last {len(canary)} canary requests"
            return
        self.last[m.name] = f"rolled back {mv.name}: {why}"
        del self.windows[m.name]
        operations.rollback(m, self.repo.metrics, cause="guard", why=why)


class RepositoryCollector:
    def __init__(self, repo: Repository, mirror: ShadowMirror):
        self.repo, self.mirror = repo, mirror

    def collect(self):
        states = GaugeMetricFamily(
            "trtserve_model_version_state", "1 for each version's current state.", labels=["model", "version", "state"]
        )
        for mv in self.repo.versions():
            if mv.state != State.UNKNOWN:
                states.add_metric([mv.model, str(mv.version), mv.state.value], 1)
        yield states
        agree = GaugeMetricFamily(
            "trtserve_shadow_agreement_ratio",
            "Share of shadow pairs whose greedy outputs agreed.",
            labels=["model", "version"],
        )
        for (model, version), s in self.mirror.stats.items():
            if s.agreement is not None:
                agree.add_metric([model, str(version)], s.agreement)
        yield agree


def install_watchers(repo: Repository) -> None:
    mirror = ShadowMirror(repo.metrics)
    guard = GuardWatch(repo)
    repo.shadow, repo.guard = mirror, guard

    def offer_shadow(mv: ModelVersion, run, ok: bool) -> None:
        sh = repo.models[mv.model].policy.shadow
        if ok and sh is not None and sh.version != mv.version:
            target = repo.models[mv.model].versions.get(sh.version)
            if target is not None:
                mirror.offer(run, target, sh.fraction)

    repo.observers += [guard, offer_shadow]
    repo.metrics.add_collector(RepositoryCollector(repo, mirror))
