"""Admitting pooling prompts (docs/pooling.md): one that fits a step is never cut in two (its second chunk
would run after cached keys, the masked attention path); longer ones and generation prompts still chunk."""

from __future__ import annotations

from scheduler_steps import run_step

from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.pooling import PoolingConfig
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.models.pooling import PoolingHead
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.features.pooling import Pooling
from trtserve.runtime.request import Request
from trtserve.runtime.scheduler import Scheduler, SchedulerConfig

BS = 4
PREFILL = SamplingParams(max_tokens=1, temperature=0.0)


def make(max_num_tokens=16) -> Scheduler:
    head = PoolingHead(PoolingConfig(task="embed", dimensions=2), None)
    config = SchedulerConfig(max_num_tokens, 8, 64, "guaranteed_no_evict")
    return Scheduler(config, BlockManager(32, BS, "engine"), pooling=Pooling(head))


def prompt(tokens: list[int], pooling: str | None = "embed") -> Request:
    return Request(SequenceId(RequestId.new()), tokens, PREFILL, 0, RequestOptions(pooling=pooling))


def chunks(out) -> list[tuple[int, int]]:
    return [(c.start, c.num_new_tokens) for c in out.chunks]


def test_a_pooling_prompt_that_fits_a_step_waits_rather_than_be_cut():
    s = make()
    for base in (100, 200, 300):
        s.add(prompt(list(range(base, base + 6))))
    assert chunks(run_step(s)) == [(0, 6), (0, 6)]  # the third's 6 tokens wait for the next step, not 4 now
    assert chunks(run_step(s)) == [(0, 6)]


def test_a_pooling_prompt_longer_than_a_step_still_runs_in_chunks():
    s = make()
    s.add(prompt(list(range(100, 120))))
    assert chunks(run_step(s)) == [(0, 16)]
    assert chunks(run_step(s)) == [(16, 4)]


def test_generation_prompts_are_cut_as_before():
    s = make()
    s.add(prompt(list(range(100, 110)), None))
    s.add(prompt(list(range(200, 210)), None))
    assert chunks(run_step(s)) == [(0, 10), (0, 6)]
