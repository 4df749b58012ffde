"""The tensorrt_llm adapter's engine busy time over the contract fakes: the sum of every
iteration's iterLatencyMS, exactly, when no iteration's stats were missed."""

from __future__ import annotations

import asyncio
import time

import pytest

from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams


def test_busy_seconds_are_the_sum_of_iteration_latencies(engine):
    from trtllm_fake_core.executor import STEP_S  # importable once the fake is installed

    async def run():
        request = GenerateRequest(
            [5, 17, 42, 99, 7], SamplingParams(max_tokens=6, temperature=0.0), RequestOptions(client_id="b")
        )
        return [d async for d in engine.generate(request)]

    assert asyncio.run(run())
    deadline = time.time() + 10
    while (
        engine.stats().scheduler.steps < 6 and time.time() < deadline
    ):  # stats are polled: wait for the last iterations
        time.sleep(0.05)
    s = engine.stats()
    assert s.scheduler.steps >= 6  # a prefill and five decode iterations at least
    assert s.busy_seconds == pytest.approx(s.scheduler.steps * STEP_S)  # each fake iteration reports STEP_S
