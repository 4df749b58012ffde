"""Utilisation signals: the process (CPU seconds, threads, resident memory), each engine's busy
time, and on CUDA each GPU's utilisation, memory and power through NVML.

NVML (the `nvidia-ml-py` package, module `pynvml`) is imported inside a function: without it, or
without a driver, there are no GPU series at all, never zeros that would read as an idle GPU.
`/metrics` reads these through `UtilisationCollector`; `GET /v2` and `/health` detail through
`snapshot()`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping

import psutil
from prometheus_client.core import GaugeMetricFamily

from trtserve.engine.stats import EngineStats

log = logging.getLogger(__name__)
BUSY_WINDOW_S = 60.0  # the recent window busy_ratio is taken over
_MIN_SPAN_S = 1.0  # a shorter span between samples gives no ratio: too noisy to mean anything
_GPU_LABELS = ["gpu", "uuid", "name"]  # DCGM-exporter's gpu / UUID / modelName


@functools.cache
def _nvml():
    """The initialised pynvml module, or None without the package, a driver or a GPU (asked once)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as err:  # no package, no driver (NVMLError_LibraryNotFound, DriverNotLoaded, ...)
        log.debug("no NVML, so no GPU utilisation: %s", err)
        return None
    return pynvml


def gpus() -> list[dict]:
    """One dict per GPU NVML sees: index, uuid, name and each reading the device supports
    (utilization_ratio 0-1, memory_used_bytes, memory_total_bytes, power_watts); [] without NVML."""
    nvml = _nvml()
    if nvml is None:
        return []
    out = []
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as err:
        log.debug("nvmlDeviceGetCount failed: %s", err)
        return []
    for i in range(count):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            gpu = {"index": i, "uuid": _text(nvml.nvmlDeviceGetUUID(h)), "name": _text(nvml.nvmlDeviceGetName(h))}
        except nvml.NVMLError as err:  # a device that fell off the bus: leave it out
            log.debug("GPU %d unreadable: %s", i, err)
            continue
        readings: dict[str, Callable[[], float]] = {
            "utilization_ratio": lambda h=h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0,
            "memory_used_bytes": lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h).used,
            "memory_total_bytes": lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h).total,
            "power_watts": lambda h=h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,  # NVML reports milliwatts
        }
        for key, read in readings.items():
            with contextlib.suppress(nvml.NVMLError):  # not supported on this device (power on some boards): absent
                gpu[key] = read()
        out.append(gpu)
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # older pynvml returns bytes


def process() -> dict:
    """This process: cpu_seconds (user + system), threads, resident_memory_bytes."""
    p = psutil.Process()
    with p.oneshot():
        cpu = p.cpu_times()
        return {
            "cpu_seconds": cpu.user + cpu.system,
            "threads": p.num_threads(),
            "resident_memory_bytes": p.memory_info().rss,
        }


class BusyWindow:
    """Each engine's busy fraction over the recent window, from the busy_seconds samples taken
    whenever /metrics is scraped or a snapshot is asked for (no thread of its own)."""

    def __init__(self, window_s: float = BUSY_WINDOW_S):
        self.window_s = window_s
        self._samples: dict[tuple[str, str], deque[tuple[float, float]]] = {}  # key -> (monotonic, busy s)
        self._lock = threading.Lock()  # scrapes and health checks may sample at once

    def ratio(self, key: tuple[str, str], busy_seconds: float, now: float | None = None) -> float | None:
        """Record this sample; the busy fraction since the oldest sample in the window (None under 1 s)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            samples = self._samples.setdefault(key, deque())
            if samples and busy_seconds < samples[-1][1]:
                samples.clear()  # a new engine under the same key: its count restarted
            samples.append((now, busy_seconds))
            while len(samples) > 2 and now - samples[1][0] >= self.window_s:
                samples.popleft()  # keep one sample at least a window old, so the span covers the window
            t0, b0 = samples[0]
        if now - t0 < _MIN_SPAN_S:
            return None
        return min(1.0, (busy_seconds - b0) / (now - t0))


_WINDOW = BusyWindow()


def snapshot(engines: Mapping[tuple[str, str], EngineStats], window: BusyWindow | None = None) -> dict:
    """Utilisation detail for `GET /v2` and `/health`.

    engines: (model, version) -> that engine's `Engine.stats()`, for the versions being served.
    window: whose samples busy_ratio is taken from (`Metrics.utilisation()` passes its own).
    Returns {"process": {cpu_seconds, threads, resident_memory_bytes},
             "engines": [{model, version, busy_seconds, busy_ratio?}],   # busy_ratio: over the last
             "gpus": [{index, uuid, name, utilization_ratio?, ...}]}    # minute; absent under 1 s of samples
    An engine whose backend cannot measure busy time is listed without busy_seconds; "gpus" is
    absent (not empty) without NVML, so a reader can tell "no GPU telemetry" from "no GPU".
    """
    out: dict = {"process": process(), "engines": []}
    for (model, version), stats in engines.items():
        entry: dict = {"model": model, "version": version}
        if stats.busy_seconds is not None:
            entry["busy_seconds"] = stats.busy_seconds
            ratio = (window or _WINDOW).ratio((model, version), stats.busy_seconds)
            if ratio is not None:
                entry["busy_ratio"] = ratio
        out["engines"].append(entry)
    if _nvml() is not None:
        out["gpus"] = gpus()
    return out


class UtilisationCollector:
    """The series prometheus_client's ProcessCollector lacks: process_threads, each engine's
    recent busy fraction, and the GPU gauges (none at all without NVML)."""

    def __init__(self, engines: Callable[[], Mapping[tuple[str, str], EngineStats]]):
        self.engines = engines
        self.window = BusyWindow()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        threads = GaugeMetricFamily("process_threads", "OS threads in this process.")
        threads.add_metric([], psutil.Process().num_threads())
        yield threads
        ratio = GaugeMetricFamily(
            "trtserve_engine_busy_ratio",
            f"Fraction of the last {BUSY_WINDOW_S:.0f} s (at most) the engine spent executing steps, "
            "between samples taken at scrapes.",
            labels=["model", "version"],
        )
        for key, stats in self.engines().items():
            value = None if stats.busy_seconds is None else self.window.ratio(key, stats.busy_seconds)
            if value is not None:
                ratio.add_metric(list(key), value)
        yield ratio
        yield from _gpu_families(gpus())


def _gpu_families(devices: list[dict]) -> Iterator[GaugeMetricFamily]:
    if not devices:
        return
    families = {
        "utilization_ratio": "Fraction of the last sample period a kernel ran on the GPU (NVML).",
        "memory_used_bytes": "GPU memory in use, by every process (NVML).",
        "memory_total_bytes": "GPU memory in all (NVML).",
        "power_watts": "GPU power draw (NVML).",
    }
    for key, doc in families.items():
        g = GaugeMetricFamily(f"trtserve_gpu_{key}", doc, labels=_GPU_LABELS)
        for d in devices:
            if key in d:
                g.add_metric([str(d["index"]), d["uuid"], d["name"]], d[key])
        yield g
