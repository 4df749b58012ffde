"""Helpers of the Ray tests (a module of its own: `conftest` names several modules in this suite)."""

from __future__ import annotations

import time


def replica_states(app: str, deployment: str) -> dict[str, int]:
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None or deployment not in status.deployments:
        return {}
    return {
        str(k.value if hasattr(k, "value") else k): v for k, v in status.deployments[deployment].replica_states.items()
    }


def wait_for(predicate, timeout: float, what: str, step: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
