"""Per-request timings of in-process peers (HF transformers) as a `trtserve.bench` BenchRun.

All requests of a workload are taken to arrive at once at `t0` (request rate inf), as the HTTP
peers' requests do, so TTFT includes the time a request waits for earlier batches.
"""

from __future__ import annotations

from trtserve.bench.client import BenchRun, RequestResult
from trtserve.bench.workload import BenchRequest


def request_result(req: BenchRequest, t0: float, token_times: list[float], done: float) -> RequestResult:
    """One request's result from the perf_counter times of its useful tokens and of its response.

    token_times: when each of its first `output_len` tokens was produced (s, perf_counter);
    done: when its response is complete (a static batch returns when its longest request ends).
    """
    res = RequestResult(prompt_len=req.prompt_len, output_len=req.output_len)
    times = token_times[: req.output_len]
    if not times:
        res.error = "no token produced"
        return res
    res.success = True
    res.output_tokens = len(times)
    res.ttft = times[0] - t0
    res.itl = [b - a for a, b in zip(times, times[1:], strict=False)]
    res.latency = max(done, times[-1]) - t0
    return res


def bench_run(name: str, results: list[RequestResult], duration: float) -> BenchRun:
    return BenchRun(name, name, "in-process", results, duration, float("inf"), 1.0, None, None)
