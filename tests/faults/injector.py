"""Fault injection into the torch engine loop, installed by patching EngineCore in a test server.

`install(path)` wraps `EngineCore.step` and `ModelRunner.execute` in this process only (the launcher,
tests/faults/launch.py, calls it before `trtserve run`). Each engine core then looks for the fault
file before each step with work; when it appears, the core reads it, deletes it (a fault fires
once) and applies it. The file is one JSON object:

    {"kind": "raise"}                    the next step's model call raises (only its requests fail)
    {"kind": "slow", "seconds": 3}       the next step first sleeps this long
    {"kind": "kill"}                     the engine thread dies, as from a bug outside a step
    {"kind": "kv_exhaust", "seconds": 2} every free KV block is taken for this long

`Faults.arm` (tests/faults/plugin.py) writes it atomically so that the engine never reads half.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)
KINDS = ("raise", "slow", "kill", "kv_exhaust")
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
    """The faults of one engine core: a repository server runs several, all reading the same file."""

    def __init__(self, path: Path):
        self.path = path
        self.pending_raise = False
        self.kv_held_until: float | None = None

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
        """Called in the engine thread before a step with work; `blocks` is the core's BlockManager."""
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


def install(path: Path) -> None:
    """Patch the torch engine core of this process so that each core applies the faults written to `path`."""
    from trtserve.runtime.engine_core import EngineCore
    from trtserve.runtime.runner import ModelRunner

    injectors: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # EngineCore -> its FaultInjector
    stepping = threading.local()  # the injector of the core whose step this engine thread runs
    step, execute = EngineCore.step, ModelRunner.execute

    @functools.wraps(step)
    def step_with_faults(core):
        injector = injectors.setdefault(core, FaultInjector(path))
        injector.before_step(core.blocks)
        stepping.injector = injector
        try:
            return step(core)
        finally:
            stepping.injector = None

    @functools.wraps(execute)
    def execute_with_faults(runner, *args, **kwargs):
        injector = getattr(stepping, "injector", None)
        if injector is not None and injector.pending_raise:
            injector.pending_raise = False
            raise InjectedFault("injected fault: this engine step raised")
        return execute(runner, *args, **kwargs)

    EngineCore.step = step_with_faults
    ModelRunner.execute = execute_with_faults
    log.warning("fault injection is ON: engine cores read faults from %s", path)
