"""`REPO_DIR/<model>/policy.yaml`: which versions load, labels, traffic weights, shadow, guard and
the KV budget of a model, validated by pydantic and written atomically (temp file + rename).

    version_policy: {latest: 1}          # or {all: true}, or {specific: [1, 3]}
    labels: {stable: 1, canary: 2}
    weights: {1: 90, 2: 10}              # share of unpinned traffic per version; empty: all to `stable`
    shadow: {version: 2, fraction: 0.2}  # mirror greedy requests to a version, compare, answer with the primary
    guard: {version: 2, rules: "error_rate<0.01,p95_ttft<1.5x", window: 20}
    kv_cache_memory: 16MiB               # KV budget of each loaded version (default: a share of --kv-cache-memory)
    history: [...]                       # earlier routing states, newest last; `rollback` pops one
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from pydantic import BaseModel, ByteSize, ConfigDict, Field, ValidationError, model_validator

from trtserve.engine.config_file import describe_validation_error
from trtserve.engine.errors import UserError

POLICY_FILE = "policy.yaml"
MAX_HISTORY = 20  # routing states kept for rollback


class VersionPolicy(BaseModel):
    """Triton's version_policy: exactly one of latest / all / specific."""

    model_config = ConfigDict(extra="forbid")
    latest: int | None = Field(None, ge=1)
    all: bool | None = None
    specific: list[int] | None = None

    @model_validator(mode="after")
    def _one(self) -> VersionPolicy:
        given = [k for k in ("latest", "all", "specific") if getattr(self, k) not in (None, False)]
        if len(given) > 1:
            raise ValueError(f"give one of latest, all or specific, not {' and '.join(given)}")
        return self

    def select(self, versions: list[int]) -> list[int]:
        """The versions (ascending) this policy loads out of those on disk."""
        if self.all:
            return sorted(versions)
        if self.specific is not None:
            return sorted(v for v in versions if v in self.specific)
        return sorted(versions)[-(self.latest or 1) :]


class Shadow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1)
    fraction: float = Field(gt=0.0, le=1.0)


class Guard(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1)
    rules: str  # "error_rate<0.01,p95_ttft<1.5x" (guard.py parses it)
    window: int = Field(20, ge=1)  # canary requests per verdict


class Routing(BaseModel):
    """What `rollback` restores: labels and weights (and the guard that watched them)."""

    model_config = ConfigDict(extra="forbid")
    labels: dict[str, int] = {}
    weights: dict[int, float] = {}
    guard: Guard | None = None

    @model_validator(mode="after")
    def _positive(self) -> Routing:
        if any(w < 0 for w in self.weights.values()):
            raise ValueError("weights must not be negative")
        if self.weights and sum(self.weights.values()) <= 0:
            raise ValueError("weights must not all be zero")
        return self


class Policy(Routing):
    version_policy: VersionPolicy = VersionPolicy(latest=1)
    shadow: Shadow | None = None
    kv_cache_memory: ByteSize | None = None
    history: list[Routing] = []

    def routing(self) -> Routing:
        return Routing(labels=dict(self.labels), weights=dict(self.weights), guard=self.guard)

    def change(self, labels: dict[str, int], weights: dict[int, float], guard: Guard | None = None) -> Policy:
        """A new policy with this routing, the current one pushed on the history."""
        history = [*self.history, self.routing()][-MAX_HISTORY:]
        new = self.model_copy(update={"labels": labels, "weights": weights, "guard": guard, "history": history})
        return Policy.model_validate(new.model_dump(exclude_unset=True))  # unset fields stay unset

    def rolled_back(self) -> Policy:
        if not self.history:
            raise UserError("there is no earlier routing state to roll back to")
        prev = self.history[-1]
        return self.model_copy(
            update={"labels": prev.labels, "weights": prev.weights, "guard": prev.guard, "history": self.history[:-1]}
        )

    def referenced(self) -> set[int]:
        """Versions that labels, weights or shadow send traffic to."""
        out = set(self.labels.values()) | {v for v, w in self.weights.items() if w > 0}
        return out | ({self.shadow.version} if self.shadow else set())


def read_policy(model_dir: Path) -> Policy:
    path = model_dir / POLICY_FILE
    if not path.is_file():
        return Policy()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"{path} is not valid YAML ({err}); fix or delete it") from None
    try:
        return Policy.model_validate(data)
    except ValidationError as err:
        raise UserError(describe_validation_error(err, str(path), Policy)) from None


def write_policy(model_dir: Path, policy: Policy) -> None:
    """Atomic: readers (and a restart) see the old file or the new one, never half of one."""
    # Unset fields stay out: a version_policy never set leaves a tensor model's config.pbtxt in charge.
    data = policy.model_dump(mode="json", exclude_none=True, exclude_unset=True)
    for routing in [data, *data.get("history", [])]:  # versions stay integers in the YAML
        routing["weights"] = {int(v): w for v, w in routing.get("weights", {}).items()}
    fd, tmp = tempfile.mkstemp(prefix=".policy-", suffix=".yaml", dir=model_dir)
    try:
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(data, f, sort_keys=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, model_dir / POLICY_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
