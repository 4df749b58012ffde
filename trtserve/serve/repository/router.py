"""Which version answers: `name` (the weighted choice), `name:VERSION` (pinned), `name@LABEL`.

A request with a routing key (the OpenAI `user` field or an `X-Session-Id` header) is hashed to a
point in [0, 1); the versions' weights, in ascending version order, cut [0, 1) into ranges, and
the range holding the point answers. So the same key lands on the same version for as long as
the weights (and the set of ready versions) stay the same. A request without a key gets a random
point.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from trtserve.serve.errors import APIError


@dataclass(frozen=True)
class Target:
    """What a request asked for: a model, and maybe a version or a label (never both)."""

    model: str
    version: int | None = None
    label: str | None = None

    def __str__(self) -> str:
        if self.version is not None:
            return f"{self.model}:{self.version}"
        return f"{self.model}@{self.label}" if self.label else self.model


def ascii_int(text: str) -> int | None:
    """The integer `text` writes in ASCII digits, else None ("²" and "٣" are digits to str.isdigit,
    which int() refuses)."""
    return int(text) if text.isascii() and text.isdigit() else None


def parse_target(spec: str, version: str | None = None) -> Target:
    """`name`, `name:VERSION` or `name@LABEL`; `version` (a KServe path's) pins it too."""
    name, label, pinned = spec, None, None
    head, sep, tail = spec.rpartition(":")
    if sep and head and (number := ascii_int(tail)) is not None:
        name, pinned = head, number
    else:
        head, sep, tail = spec.rpartition("@")
        if sep and head and tail:
            name, label = head, tail
    if version not in (None, ""):
        number = ascii_int(version)
        if number is None or number < 1:
            raise APIError(404, f"model {name!r} has no version {version!r}; versions are positive integers")
        if pinned is not None and pinned != number:
            raise APIError(400, f"the model names version {pinned} and the path version {version}; give one")
        pinned = number
    if pinned is not None and pinned < 1:
        raise APIError(404, f"model {name!r} has no version {pinned}; versions are positive integers")
    return Target(name, pinned, None if pinned is not None else label)


def sticky_point(key: str | None) -> float:
    """A routing key's point in [0, 1): the first 8 bytes of its SHA-256; no key: random."""
    if key is None:
        return random.random()
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def weighted_choice(weights: dict[int, float], point: float) -> int:
    """The version whose range (ascending versions, widths proportional to weight) holds point."""
    items = [(v, w) for v, w in sorted(weights.items()) if w > 0]
    if not items:
        raise ValueError("no version has a positive weight")
    total = sum(w for _, w in items)
    edge = 0.0
    for v, w in items:
        edge += w / total
        if point < edge:
            return v
    return items[-1][0]  # point within rounding of 1.0
