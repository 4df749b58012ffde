"""What a check reports: a name, a status, one line, and optional detail (plans, diffs) for the
machine-readable outputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from trtserve.engine.errors import UserError


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    name: str  # one of CHECKS
    status: Status
    message: str  # one line: why it failed, why it was skipped, or what passed
    seconds: float = 0.0  # wall time of the check
    detail: str = ""  # multi-line extra (a plan, a lock diff); JSON and JUnit carry it, the table does not

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": str(self.status),
            "message": self.message,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
        }


class CheckFailed(Exception):
    """A check's own failure with its one-line message (and detail); any UserError counts too."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


class Skipped(Exception):
    """A check that does not apply here, with the reason."""


@dataclass(frozen=True)
class Outcome:
    """What a check function returns when it passes."""

    message: str
    detail: str = ""


def timed(name: str, fn: Callable[[], Outcome]) -> CheckResult:
    """Run one check: Outcome -> pass; CheckFailed or UserError -> fail; Skipped -> skip.
    Any other exception is our bug and propagates with its stack trace."""
    start = time.perf_counter()
    try:
        out = fn()
        status, message, detail = Status.PASS, out.message, out.detail
    except Skipped as why:
        status, message, detail = Status.SKIP, str(why), ""
    except CheckFailed as err:
        status, message, detail = Status.FAIL, str(err), err.detail
    except UserError as err:
        status, message, detail = Status.FAIL, " ".join(str(err).split()), ""
    return CheckResult(name, status, message, time.perf_counter() - start, detail)


@dataclass
class ConfigReport:
    """Every check of one config file."""

    config: str  # the path as given
    target: str | None  # the target's name, or None when there is none
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "target": self.target,
            "ok": not self.failed,
            "checks": [r.to_dict() for r in self.results],
        }
