"""serve/telemetry/startup.py's clock: the start-up log's `ready in` and trtserve_startup_seconds count
from the interpreter's first import of trtserve, never from the process's start: a script that installs,
builds and then `exec`s the server keeps its process (and the OS's start time), and that wait is not the
server's."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

import pytest

CHILD = (
    "import time; from trtserve.serve.telemetry.startup import StartupClock; "
    "c = StartupClock(); c.ready({}, 0.0, 0.0); print(c.started_at, c.phases['total'], c.phases['imports'], time.time())"
)


def _child(argv: list[str]) -> tuple[float, float, float, float]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    zero, total, imports, end = map(float, out.stdout.split())
    return zero, total, imports, end


def test_the_zero_lies_between_spawn_and_exit_and_total_counts_from_it():
    before = time.time()
    zero, total, imports, end = _child([sys.executable, "-c", CHILD])
    assert before <= zero <= end <= time.time()
    assert 0.0 < total <= end - zero + 0.01 and 0.0 < imports <= total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a POSIX shell's exec")
def test_a_delay_before_exec_is_not_counted():
    delay = 3.0
    before = time.time()
    script = f"sleep {delay}; exec {shlex.quote(sys.executable)} -c {shlex.quote(CHILD)}"
    zero, total, imports, end = _child(["/bin/sh", "-c", script])
    assert zero >= before + delay  # after the sleep: the exec'd interpreter's, not the shell's start
    assert total < delay and imports < delay  # the process's start would have put the sleep in both
