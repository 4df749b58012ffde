"""The KServe SDK's cases (kserve_sdk_cases.py) run in a pytest process of their own: kserve's
generated gRPC modules and tritonclient's (tests/api, the server's gRPC front end) define the same
protobuf symbols (`inference.ServerLiveRequest`, ...), and one process cannot import both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).with_name("kserve_sdk_cases.py")


@pytest.mark.timeout(600)
def test_the_kserve_sdk_cases_pass_in_a_process_of_their_own():
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
        cwd=CASES.parents[2],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "3 passed" in r.stdout, r.stdout[-2000:]
