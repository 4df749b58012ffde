"""Typed identities of engine requests and their sequences.

An engine request is named by a `RequestId` that the contract generates (never parsed from, nor equal
to, anything a client sent), and one of its n sequences by a `SequenceId`. Whatever id a client sent
travels as `RequestOptions.client_id`, for logs and echoing only.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

_next_id = itertools.count(1)


@dataclass(frozen=True, slots=True)
class RequestId:
    """One engine request, unique in this process. Create with `RequestId.new()`."""

    value: int

    @classmethod
    def new(cls) -> RequestId:
        return cls(next(_next_id))  # itertools.count is atomic under the GIL

    def __str__(self) -> str:
        return f"req-{self.value}"


@dataclass(frozen=True, slots=True)
class SequenceId:
    """Sequence `index` (0 <= index < n) of a request."""

    request: RequestId
    index: int = 0

    def __str__(self) -> str:
        return f"{self.request}/{self.index}"
