"""Fault injection into the torch engine loop, for tests only.

Off unless the environment variable TRTSERVE_FAULTS names a file. The engine thread then looks for
that file before each step that has work; when it appears, the engine reads it, deletes it (a fault
fires once) and applies it. The file is one JSON object:

    {"kind": "raise"}                    the next step's model call raises (only its requests fail)
    {"kind": "slow", "seconds": 3}       the next step first sleeps this long
    {"kind": "kill"}                     the engine thread dies, as from a bug outside a step
    {"kind": "kv_exhaust", "seconds": 2} every free KV block is taken for this long

Write it atomically (write a temporary file beside it, then rename) so the engine never reads half.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)
ENV = "TRTSERVE_FAULTS"
_HOLDER = ("trtserve-fault", "kv_exhaust")  # the block-manager sequence that holds the exhausted blocks


class InjectedFault(RuntimeError):
    """Raised by an armed `raise` fault inside a step's model call."""


class EngineKilled(BaseException):  # noqa: N818 - not an Exception: no step handler may catch it
    """Raised by an armed `kill` fault: it escapes the step's handlers and ends the engine loop."""


@dataclass
class Fault:
    kind: Literal["raise", "slow", "kill", "kv_exhaust"]
    seconds: float = 0.0


class FaultInjector:
    def __init__(self, path: Path):
        self.path = path
        self.pending_raise = False
        self.kv_held_until: float | None = None

    @classmethod
    def from_env(cls) -> FaultInjector | None:
        path = os.environ.get(ENV)
        if not path:
            return None
        log.warning("fault injection is ON (%s=%s); never set this outside tests", ENV, path)
        return cls(Path(path))

    def _take(self) -> Fault | None:
        try:
            data = json.loads(self.path.read_text())
            self.path.unlink()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            log.error("ignoring unreadable fault file %s: %s", self.path, err)
            return None
        log.warning("injecting fault %s", data)
        return Fault(kind=data["kind"], seconds=float(data.get("seconds", 0.0)))

    def before_step(self, blocks) -> None:
        """Called by the engine thread before a step with work; `blocks` is the BlockManager."""
        if self.kv_held_until is not None and time.monotonic() >= self.kv_held_until:
            blocks.free(_HOLDER)
            self.kv_held_until = None
        fault = self._take()
        if fault is None:
            return
        if fault.kind == "raise":
            self.pending_raise = True
        elif fault.kind == "slow":
            time.sleep(fault.seconds)
        elif fault.kind == "kill":
            raise EngineKilled("injected fault: the engine thread was killed")
        elif fault.kind == "kv_exhaust" and self.kv_held_until is None:
            free = blocks.num_free_blocks
            if free and blocks.allocate(_HOLDER, [], free * blocks.block_size):
                self.kv_held_until = time.monotonic() + fault.seconds

    def wrap_execute(self, execute: Callable) -> Callable:
        """The model call, raising once when a `raise` fault is armed."""

        def execute_with_faults(*args, **kwargs):
            if self.pending_raise:
                self.pending_raise = False
                raise InjectedFault("injected fault: this engine step raised")
            return execute(*args, **kwargs)

        return execute_with_faults
