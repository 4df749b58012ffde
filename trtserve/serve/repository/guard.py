"""A canary's guard: rules over live traffic, e.g. "error_rate<0.01,p95_ttft<1.5x".

    error_rate<X      the canary's share of failed requests stays below X
    p95_ttft<S        the canary's 95th-percentile time to first token stays below S seconds
    p95_ttft<Kx       ... below K times stable's over the same window (skipped until stable has data)

A verdict is taken once the canary has answered `window` requests since the guard was set, and
again after every later one (over its last `window`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from trtserve.engine.errors import UserError
from trtserve.serve.repository.version import Outcome

_RULE = re.compile(r"^\s*(error_rate|p95_ttft)\s*<\s*([0-9]*\.?[0-9]+)\s*(x?)\s*$")


@dataclass(frozen=True)
class Rule:
    metric: str  # "error_rate" | "p95_ttft"
    limit: float
    relative: bool  # limit is a multiple of stable's value

    def __str__(self) -> str:
        return f"{self.metric}<{self.limit:g}{'x' if self.relative else ''}"


def parse_rules(text: str) -> list[Rule]:
    rules = []
    for part in text.split(","):
        found = _RULE.match(part)
        if found is None:
            raise UserError(
                f"guard rule {part.strip()!r} is not understood; write rules like "
                "'error_rate<0.01' or 'p95_ttft<1.5x' (times stable) or 'p95_ttft<2' (seconds), comma-separated"
            )
        metric, limit, x = found.groups()
        if metric == "error_rate" and x:
            raise UserError("error_rate takes an absolute limit (e.g. error_rate<0.01), not a multiple of stable's")
        rules.append(Rule(metric, float(limit), bool(x)))
    return rules


def p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def measure(metric: str, outcomes: list[Outcome]) -> float | None:
    if not outcomes:
        return None
    if metric == "error_rate":
        return sum(not o.ok for o in outcomes) / len(outcomes)
    return p95([o.ttft for o in outcomes if o.ok and o.ttft is not None])


def verdict(rules: list[Rule], canary: list[Outcome], stable: list[Outcome]) -> str | None:
    """Why the canary fails its guard, or None if it passes (or there is nothing to compare yet)."""
    for rule in rules:
        value = measure(rule.metric, canary)
        if value is None:
            continue
        limit = rule.limit
        if rule.relative:
            base = measure(rule.metric, stable)
            if base is None:
                continue
            limit = rule.limit * base
        if not value < limit:
            return f"{rule}: the canary's {rule.metric} is {value:.4g} over {len(canary)} requests (limit {limit:.4g})"
    return None
