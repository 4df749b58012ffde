"""One model of the repository: its versions, its policy, and the routing rule over them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from trtserve.serve.errors import APIError
from trtserve.serve.repository.policy import Policy, write_policy
from trtserve.serve.repository.router import Target, sticky_point, weighted_choice
from trtserve.serve.repository.version import ModelVersion, State

RETRY_AFTER = "2"  # seconds a client waits before asking a model with no ready version again


@dataclass
class RepoModel:
    name: str
    dir: Path | None  # REPO_DIR/<name>; None for a single engine dir (its policy lives in memory)
    versions: dict[int, ModelVersion]
    policy: Policy = field(default_factory=Policy)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one load / unload at a time

    def set_policy(self, policy: Policy) -> None:
        """Persist first (atomically), then switch: a failed write changes nothing."""
        if self.dir is not None:
            write_policy(self.dir, policy)
        self.policy = policy

    def ready_versions(self) -> list[ModelVersion]:
        return [mv for _, mv in sorted(self.versions.items()) if mv.ready]

    def default_version(self) -> ModelVersion | None:
        """`stable` if it is ready, else the newest ready version."""
        stable = self.versions.get(self.policy.labels.get("stable", 0))
        if stable is not None and stable.ready:
            return stable
        ready = self.ready_versions()
        return ready[-1] if ready else None

    def wants_loaded(self) -> bool:
        """Some version is loaded or on its way: readiness then waits for the default one."""
        return any(mv.state in (State.READY, State.LOADING) for mv in self.versions.values())

    def version(self, number: int) -> ModelVersion:
        mv = self.versions.get(number)
        if mv is None:
            have = ", ".join(str(v) for v in sorted(self.versions)) or "none"
            raise APIError(404, f"model {self.name!r} has no version '{number}'; its versions are {have}")
        return mv

    def route(self, target: Target, key: str | None) -> tuple[ModelVersion, str]:
        """-> (the version that answers, the decision: "pinned" | "label" | "weighted")."""
        if target.version is not None:
            return self._ready(self.version(target.version), str(target)), "pinned"
        if target.label is not None:
            number = self.policy.labels.get(target.label)
            if number is None:
                have = ", ".join(sorted(self.policy.labels)) or "none"
                raise APIError(404, f"model {self.name!r} has no label {target.label!r}; its labels are {have}")
            return self._ready(self.version(number), str(target)), "label"
        weights = {v: w for v, w in self.policy.weights.items() if v in self.versions and self.versions[v].ready}
        if weights and sum(weights.values()) > 0:
            return self.versions[weighted_choice(weights, sticky_point(key))], "weighted"
        default = self.default_version()
        if default is None:
            raise self.unavailable()
        return default, "weighted"

    def _ready(self, mv: ModelVersion, asked: str) -> ModelVersion:
        if not mv.ready:
            why = f" ({mv.reason})" if mv.reason else ""
            raise APIError(503, f"{asked} is {mv.state.value}{why}; retry later", headers={"Retry-After": RETRY_AFTER})
        return mv

    def unavailable(self) -> APIError:
        states = "; ".join(
            f"{v}: {mv.state.value}" + (f" ({mv.reason})" if mv.reason else "")
            for v, mv in sorted(self.versions.items())
        )
        return APIError(
            503,
            f"model {self.name!r} has no ready version ({states or 'no versions'}); retry later",
            headers={"Retry-After": RETRY_AFTER},
        )
