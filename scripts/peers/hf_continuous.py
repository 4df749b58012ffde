"""transformers' own continuous batching (the paged cache behind `generate_batch`), in process.

`generate_batch` takes one max_new_tokens for all prompts, so this drives the same manager the way
`generate_batch` does (transformers 5.x, generation/continuous_batching/continuous_api.py) but adds
each request with its own max_new_tokens and no EOS (eos_token_id=-1, like ignore_eos), recording
per-token timestamps.
"""

from __future__ import annotations

import time

from peers.inprocess import bench_run, request_result
from trtserve.bench.client import BenchRun
from trtserve.bench.workload import BenchRequest


def run(model, requests: list[BenchRequest], timeout: float = 3600.0, max_batch_tokens: int = 2048) -> BenchRun:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    cfg = GenerationConfig(do_sample=False, max_new_tokens=max(r.output_len for r in requests))
    # Sized for the workload: left alone, the KV cache takes ~90% of free memory (on CPU, 14 GB here: the OOM
    # killer took the comparison) and a step may hold every prompt at once.
    page = 256
    blocks = sum(-(-(r.prompt_len + r.output_len) // page) for r in requests) + 1
    cb = ContinuousBatchingConfig(page_size=page, num_blocks=blocks, max_batch_tokens=max_batch_tokens)
    with model.continuous_batching_context_manager(
        generation_config=cfg, continuous_batching_config=cb, block=True, timeout=30
    ) as manager:
        t0 = time.perf_counter()
        ids = [
            manager.add_request(
                list(r.prompt), request_id=f"r{i}", max_new_tokens=r.output_len, record_timestamps=True, eos_token_id=-1
            )
            for i, r in enumerate(requests)
        ]
        if any(i is None for i in ids):
            raise RuntimeError("transformers' continuous batching manager refused a request")
        finished: dict[str, object] = {}
        deadline = t0 + timeout
        while len(finished) < len(requests) and time.perf_counter() < deadline:
            out = manager.get_result(timeout=1)
            if out is not None and out.is_finished():
                finished[out.request_id] = (out, time.perf_counter())
            elif out is None and not manager.is_running():
                break
        duration = time.perf_counter() - t0
    results = []
    for i, r in enumerate(requests):
        got = finished.get(f"r{i}")
        if got is None:
            res = request_result(r, t0, [], t0)
            res.error = "no result from the continuous batching manager"
        else:
            out, done = got
            res = request_result(r, t0, out.timestamps or [], out.lifespan[1] if out.lifespan[1] > 0 else done)
            if out.error:
                res.success, res.error = False, str(out.error)
        results.append(res)
    return bench_run("hf-continuous", results, duration)
