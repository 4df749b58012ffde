"""The admin operations on a model's routing: canary, promote, rollback, shadow. Each builds the
new policy, persists it (atomically) and only then switches to it, so the next request already
sees the change and a restart restores it."""

from __future__ import annotations

import logging

from trtserve.engine.errors import UserError
from trtserve.serve.errors import APIError
from trtserve.serve.repository.guard import parse_rules
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.policy import Guard, Shadow
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


def _ready(m: RepoModel, version: int, what: str) -> ModelVersion:
    mv = m.version(version)
    if not mv.ready:
        raise APIError(
            409,
            f"cannot {what} {mv.name}: it is {mv.state.value}"
            + (f" ({mv.reason})" if mv.reason else "")
            + f"; load it first (trtserve repo load {m.name} --version {version})",
        )
    return mv


def _stable(m: RepoModel) -> int:
    number = m.policy.labels.get("stable")
    if number is None:
        default = m.default_version()
        if default is None:
            raise m.unavailable()
        number = default.version
    return number


def canary(m: RepoModel, version: int, weight: float, guard: str | None = None, window: int = 20) -> None:
    """Send `weight` percent of unpinned traffic to `version`, the rest to stable."""
    if not 0 < weight < 100:
        raise APIError(400, f"--weight {weight:g} must lie strictly between 0 and 100 (percent of unpinned traffic)")
    _ready(m, version, "canary")
    stable = _stable(m)
    if stable == version:
        raise APIError(409, f"version {version} of {m.name!r} is already stable; canary another version")
    rules = None
    if guard:
        try:
            parse_rules(guard)
        except UserError as err:
            raise APIError(400, str(err)) from None
        rules = Guard(version=version, rules=guard, window=window)
    labels = {**m.policy.labels, "stable": stable, "canary": version}
    m.set_policy(m.policy.change(labels, {stable: 100 - weight, version: weight}, rules))
    log.info(
        "canary: %s:%d gets %g%% of unpinned traffic (stable %d)%s",
        m.name,
        version,
        weight,
        stable,
        f", guard {guard!r}" if guard else "",
    )


def promote(m: RepoModel, version: int) -> None:
    """`stable` moves to `version`, which then takes all unpinned traffic."""
    _ready(m, version, "promote")
    labels = {k: v for k, v in m.policy.labels.items() if not (k == "canary" and v == version)}
    m.set_policy(m.policy.change({**labels, "stable": version}, {}))
    log.info("promote: %s:%d is stable", m.name, version)


def rollback(m: RepoModel, metrics: Metrics, cause: str = "admin", why: str = "") -> None:
    """Every label and weight back to the previous state, in one step."""
    try:
        m.set_policy(m.policy.rolled_back())
    except UserError as err:
        raise APIError(409, f"cannot roll back {m.name!r}: {err}") from None
    metrics.rollbacks.labels(m.name, cause).inc()
    log.warning("rollback of %r (%s)%s; labels now %s", m.name, cause, f": {why}" if why else "", m.policy.labels)


def shadow(m: RepoModel, version: int, fraction: float) -> None:
    """Mirror `fraction` of the model's greedy requests to `version`; 0 stops it."""
    if not 0 <= fraction <= 1:
        raise APIError(400, f"--fraction {fraction:g} must lie in [0, 1]")
    m.version(version)
    new = Shadow(version=version, fraction=fraction) if fraction > 0 else None
    m.set_policy(m.policy.model_copy(update={"shadow": new}))
