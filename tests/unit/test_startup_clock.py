"""serve/startup.py's process start: the start-up log's `ready in` counts from when the process began,
so it must lie between the moment before it was spawned and the moment it ended (to a clock tick;
psutil's create_time alone is off by the fraction of a second /proc/stat's boot time drops)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

TICK = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the /proc clock is Linux's")
def test_the_process_start_lies_between_spawn_and_exit():
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", "from trtserve.serve.startup import process_start; print(repr(process_start()))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    after = time.time()
    assert before - TICK <= float(out.stdout) <= after
