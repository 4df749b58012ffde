"""What every KV transport provides (transport.py picks one): the protocol and its one error.

Its own module so that each transport (ShmTransport in transport.py, NixlTransport in
nixl_transport.py) imports it, and transport.py can pick NIXL without the two importing each other.
"""

from __future__ import annotations

from typing import Any, Protocol


class TransferError(Exception):
    """The bytes could not be read (the prefill worker is gone, or the data was released)."""


class KVTransport(Protocol):
    name: str

    def stage(self, key: str, data: memoryview | bytes) -> dict[str, Any]:
        """Make `data` readable by a peer until `unstage(key)`; returns its JSON-able description."""

    def unstage(self, key: str) -> None:
        """Free what `stage(key)` holds; unknown keys are ignored."""

    def fetch(self, where: dict[str, Any], nbytes: int) -> bytes:
        """Read the staged bytes a peer described (TransferError if they are gone)."""

    def close(self) -> None: ...
