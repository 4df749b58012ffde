"""The `faults` fixture: fault files and the launcher that starts a server reading them.

`f = faults("name")` gives a fault file; `Server(engine, ..., launcher=f.launcher)` (tests/api/conftest.py)
starts `trtserve run` with its engine cores patched to read it; `f.arm("raise")` then fails that
server's next engine step with work.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from faults.injector import KINDS

LAUNCH = Path(__file__).with_name("launch.py")


class Faults:
    """One fault file; a server started with `launcher` takes each fault armed here once."""

    def __init__(self, path: Path):
        self.path = path

    @property
    def launcher(self) -> tuple[str, ...]:
        """The server process's arguments before trtserve's own (in place of `-m trtserve.cli`)."""
        return (str(LAUNCH), str(self.path))

    def arm(self, kind: str, seconds: float = 0.0) -> None:
        """Atomically, so that the engine never reads half a file; it fires at the next step with work."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(KINDS)}")
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"kind": kind, "seconds": seconds}))
        tmp.rename(self.path)

    @property
    def pending(self) -> bool:
        """Armed and not yet taken by an engine."""
        return self.path.exists()


@pytest.fixture(scope="session")
def faults(tmp_path_factory) -> Callable[[str], Faults]:
    """A factory of fault files, each in its own tmp dir."""
    return lambda name: Faults(tmp_path_factory.mktemp("faults") / f"{name}.json")
