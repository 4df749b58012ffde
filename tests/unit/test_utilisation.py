"""Utilisation signals (serve/telemetry/utilisation.py, the engines' busy clocks): model-free."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest

from trtserve.backends.tensorrt_llm.engine import IterationBusy
from trtserve.backends.torch_engine import BusyClock
from trtserve.engine.stats import EngineStats, KVCacheStats
from trtserve.serve.telemetry import utilisation
from trtserve.serve.telemetry.metrics import Metrics


def _stats(busy: float | None) -> EngineStats:
    return EngineStats(kv_cache=KVCacheStats(blocks_total=8, blocks_free=8), busy_seconds=busy)


def _samples(text: str, name: str) -> dict[str, float]:
    """{labels: value} of every sample of `name` in a /metrics text."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, value = line.rsplit(" ", 1)
            out[labels[len(name) :]] = float(value)
    return out


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    utilisation._nvml.cache_clear()
    yield
    utilisation._nvml.cache_clear()


@pytest.fixture
def fake_nvml(monkeypatch):
    """A pynvml with two GPUs; the second cannot report power (NVML_ERROR_NOT_SUPPORTED)."""

    class NVMLError(Exception):
        pass

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100"  # older pynvml releases return bytes
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h, memory=5)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) << 30, total=80 << 30, free=0)

    def power(h):
        if h == 1:
            raise NVMLError("Not Supported")
        return 312_500  # milliwatts

    m.nvmlDeviceGetPowerUsage = power
    monkeypatch.setitem(sys.modules, "pynvml", m)
    utilisation._nvml.cache_clear()
    yield m
    utilisation._nvml.cache_clear()


def test_busy_clock_moves_while_a_step_runs():
    clock = BusyClock()
    in_step, release = threading.Event(), threading.Event()

    def engine_thread():
        clock.start()
        in_step.set()
        release.wait(5)  # the "step": other threads read the clock meanwhile
        clock.stop()

    t = threading.Thread(target=engine_thread)
    t.start()
    assert in_step.wait(5)
    first = clock.seconds()
    time.sleep(0.05)
    during = clock.seconds()
    assert during >= first + 0.04  # it grows inside the step, not only when the step ends
    release.set()
    t.join(5)
    done = clock.seconds()
    assert done >= during
    time.sleep(0.02)
    assert clock.seconds() == done  # idle time is not busy time


def test_trtllm_busy_sums_iteration_latencies_and_stops_at_a_gap():
    busy = IterationBusy()
    busy.add([{"iter": 4, "iterLatencyMS": 12.5}, {"iter": 5, "iterLatencyMS": 7.5}])
    busy.add([])
    assert busy.seconds() == pytest.approx(0.020)
    busy.add([{"iter": 7, "iterLatencyMS": 3.0}])  # iteration 6 was dropped: the sum is no longer the truth
    assert busy.seconds() is None
    busy.add([{"iter": 8, "iterLatencyMS": 3.0}])
    assert busy.seconds() is None


def test_trtllm_busy_without_latency_field_is_unknown():
    busy = IterationBusy()
    busy.add([{"iter": 0, "numActiveRequests": 1}])
    assert busy.seconds() is None


def test_metrics_export_process_and_busy_series(no_nvml):
    m = Metrics("tiny", lambda: _stats(2.5))
    m.add_engine("other", "1", lambda: _stats(None))  # a backend that cannot measure busy time
    text = m.render().decode()
    assert _samples(text, "trtserve_engine_busy_seconds_total") == {'{model="tiny",version="1"}': 2.5}
    assert _samples(text, "process_cpu_seconds_total")[""] > 0
    assert _samples(text, "process_resident_memory_bytes")[""] > 1 << 20
    assert _samples(text, "process_threads")[""] >= 1
    assert "trtserve_gpu_" not in text  # no NVML: no GPU series at all, not zeros


def test_nvml_absent_snapshot_has_no_gpus(no_nvml):
    snap = utilisation.snapshot({("tiny", "1"): _stats(1.0), ("other", "2"): _stats(None)})
    assert "gpus" not in snap
    assert snap["process"]["threads"] >= 1 and snap["process"]["resident_memory_bytes"] > 0
    assert snap["engines"] == [
        {"model": "tiny", "version": "1", "busy_seconds": 1.0},
        {"model": "other", "version": "2"},
    ]


def test_fake_nvml_gives_gpu_series(fake_nvml):
    text = Metrics("tiny", lambda: _stats(0.0)).render().decode()
    util = _samples(text, "trtserve_gpu_utilization_ratio")
    assert util == {
        '{gpu="0",name="NVIDIA H100",uuid="GPU-0"}': 0.40,
        '{gpu="1",name="NVIDIA H100",uuid="GPU-1"}': 0.41,
    }
    assert _samples(text, "trtserve_gpu_memory_used_bytes")['{gpu="1",name="NVIDIA H100",uuid="GPU-1"}'] == 2 << 30
    assert set(_samples(text, "trtserve_gpu_memory_total_bytes").values()) == {float(80 << 30)}
    # GPU 1 cannot report power: its sample is absent, GPU 0's is there
    assert _samples(text, "trtserve_gpu_power_watts") == {'{gpu="0",name="NVIDIA H100",uuid="GPU-0"}': 312.5}
    snap = utilisation.snapshot({})
    assert [g["uuid"] for g in snap["gpus"]] == ["GPU-0", "GPU-1"]
    assert "power_watts" not in snap["gpus"][1]


def test_nvml_init_failure_is_absent(monkeypatch):
    m = types.ModuleType("pynvml")
    m.NVMLError = RuntimeError

    def init():
        raise RuntimeError("NVML Shared Library Not Found")

    m.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", m)
    utilisation._nvml.cache_clear()
    try:
        assert utilisation.gpus() == []
        assert "gpus" not in utilisation.snapshot({})
    finally:
        utilisation._nvml.cache_clear()


def test_busy_window_ratio():
    w = utilisation.BusyWindow(window_s=10)
    assert w.ratio(("m", "1"), 0.0, now=100.0) is None  # one sample: no span
    assert w.ratio(("m", "1"), 0.2, now=100.5) is None  # under a second
    assert w.ratio(("m", "1"), 1.0, now=102.0) == pytest.approx(0.5)
    w.ratio(("m", "1"), 5.0, now=111.0)
    # the samples older than the window are dropped, keeping one a window old (t=102)
    assert w.ratio(("m", "1"), 6.0, now=113.0) == pytest.approx(5.0 / 11.0)
    assert w.ratio(("m", "1"), 0.5, now=114.0) is None  # a new engine under the same key: its count restarted
    assert w.ratio(("m", "1"), 1.0, now=116.0) == pytest.approx(0.25)  # measured from the restart


def test_metrics_utilisation_covers_the_loaded_engines(no_nvml):
    m = Metrics("tiny", lambda: _stats(3.0))
    m.add_engine("tiny", "2", lambda: _stats(None))
    snap = m.utilisation()
    assert [(e["model"], e["version"], e.get("busy_seconds")) for e in snap["engines"]] == [
        ("tiny", "1", 3.0),
        ("tiny", "2", None),
    ]
    m.remove_engine("tiny", "2")
    assert len(m.utilisation()["engines"]) == 1
