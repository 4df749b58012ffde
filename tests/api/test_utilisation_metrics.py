"""Utilisation series on a live server's /metrics: the process series, and engine busy seconds
that grow while a request runs."""

from __future__ import annotations

import importlib.util
import json

import httpx
import pytest

pytestmark = pytest.mark.timeout(120)
BUSY = "trtserve_engine_busy_seconds_total"


def _text(server) -> str:
    return httpx.get(f"{server.url}/metrics", timeout=30).text


def test_process_series(server):
    text = _text(server)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_threads"):
        assert server.metric(name) > 0, name
    assert "# TYPE trtserve_engine_busy_ratio gauge" in text
    if importlib.util.find_spec("pynvml") is None:
        assert "trtserve_gpu_" not in text  # no NVML: the GPU series are absent, not zero


def test_busy_seconds_grow_during_a_request(server, model_name):
    before = server.metric(BUSY)
    body = {"model": model_name, "prompt": "Once", "max_tokens": 200, "ignore_eos": True, "stream": True}
    seen, during = 0, None
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            seen += len(json.loads(line[6:])["choices"])
            if seen == 20:
                during = server.metric(BUSY)  # read while the request is still generating
    after = server.metric(BUSY)
    assert before < during < after
