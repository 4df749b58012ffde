"""Scheduler over plain ints: budgets, chunked prefill, capacity policies, preemption, priority."""

from __future__ import annotations

from scheduler_steps import run_step

from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.request import Request, Status
from trtserve.runtime.scheduler import Scheduler, SchedulerConfig

BS = 4


def make(num_blocks=32, max_num_tokens=16, max_batch_size=8, policy="guaranteed_no_evict", max_seq_len=64):
    bm = BlockManager(num_blocks, BS, "engine")
    return Scheduler(SchedulerConfig(max_num_tokens, max_batch_size, max_seq_len, policy), bm), bm


NAMES: dict[RequestId, str] = {}


def req(rid, n_prompt, max_tokens=4, arrival=0, priority=0.0, n=1, base=0):
    request_id = RequestId.new()
    NAMES[request_id] = rid
    prompt = list(range(base, base + n_prompt))
    return Request(
        SequenceId(request_id),
        prompt,
        SamplingParams(max_tokens=max_tokens, n=n),
        arrival,
        RequestOptions(priority=priority),
    )


def name(r: Request) -> str:
    return NAMES[r.seq.request]


def test_chunked_prefill_mixes_with_decode_under_the_token_budget():
    s, bm = make(max_num_tokens=10)
    a, b = req("a", 6, arrival=0), req("b", 20, arrival=1, base=100)
    s.add(a)
    out = run_step(s)
    assert [(name(c.request), c.num_new_tokens) for c in out.chunks] == [("a", 6)]
    s.add(b)
    out = run_step(s)  # a decodes 1 token, b prefills a 9-token chunk
    assert [(name(c.request), c.num_new_tokens) for c in out.chunks] == [("a", 1), ("b", 9)]
    out = run_step(s)
    assert [(name(c.request), c.num_new_tokens) for c in out.chunks] == [("a", 1), ("b", 9)]
    out = run_step(s)  # b's last 2 prompt tokens, then it samples
    assert [(name(c.request), c.num_new_tokens) for c in out.chunks] == [("a", 1), ("b", 2)]
    assert b.num_computed_tokens == 20 and b.output_token_ids == [7]
    assert bm.block_table(b.seq) == [2, 3, 4, 5, 6]  # exact ids: a holds 0, 1


def test_max_batch_size_limits_admission():
    s, _ = make(max_batch_size=2)
    for i in range(3):
        s.add(req(f"r{i}", 3, arrival=i, base=10 * i))
    out = run_step(s)
    assert [name(c.request) for c in out.chunks] == ["r0", "r1"]
    assert [name(r) for r in s.waiting] == ["r2"]


def test_guaranteed_no_evict_reserves_the_worst_case():
    # 8 blocks; each request needs (6 prompt + 10 new) / 4 = 4 blocks at worst
    s, bm = make(num_blocks=8, policy="guaranteed_no_evict")
    for i in range(3):
        s.add(req(f"r{i}", 6, max_tokens=10, arrival=i, base=10 * i))
    out = run_step(s)
    assert [name(c.request) for c in out.chunks] == ["r0", "r1"]
    assert bm.stats().used == 4  # only 2 blocks each allocated so far; the rest is reserved
    for _ in range(40):
        out = run_step(s)
        assert not out.preempted
        if not s.running and not s.waiting:
            break
    assert s.num_preemptions == 0
    assert bm.stats().used == 0


def test_max_utilization_preempts_the_newest_and_recomputes_it():
    s, bm = make(num_blocks=5, policy="max_utilization")
    a, b = req("a", 6, max_tokens=10, arrival=0), req("b", 6, max_tokens=10, arrival=1, base=50)
    s.add(a)
    s.add(b)
    run_step(s)  # both admitted greedily: 2 blocks each
    assert a.status is b.status is Status.RUNNING and bm.stats().used == 4
    preempted = []
    for _ in range(6):
        preempted += run_step(s).preempted
    assert preempted and preempted[0] is b  # the newest goes
    assert b.status is Status.WAITING and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert b.output_token_ids  # what it generated is kept and recomputed later
    for _ in range(60):
        run_step(s)
        if not s.running and not s.waiting:
            break
    assert len(a.output_token_ids) == len(b.output_token_ids) == 10
    bm.check_invariants()
    assert bm.stats().used == 0


def test_abort_frees_blocks_at_once():
    s, bm = make()
    a = req("a", 9)
    s.add(a)
    run_step(s)
    assert bm.stats().used == 3
    s.finish(a, "abort")
    assert bm.stats().used == 0 and a.finish_reason == "abort" and not s.running
    w = req("w", 3, arrival=1)
    s.add(w)
    s.finish(w, "abort")  # waiting requests too
    assert not s.waiting


def test_priority_then_fcfs():
    s, _ = make(max_batch_size=1)
    s.add(req("low", 3, arrival=0, priority=0.0))
    s.add(req("high", 3, arrival=1, priority=1.0))
    s.add(req("low2", 3, arrival=2, priority=0.0))
    assert [name(r) for r in s.waiting] == ["high", "low", "low2"]
    assert name(run_step(s).chunks[0].request) == "high"


def test_prefix_hit_skips_cached_tokens():
    s, bm = make()
    a = req("a", 9, max_tokens=1)
    s.add(a)
    run_step(s)  # finishes after one token; its 2 full blocks stay cached
    b = req("b", 9, max_tokens=1, arrival=1)
    s.add(b)
    out = run_step(s)
    assert [(name(c.request), c.num_new_tokens) for c in out.chunks] == [("b", 1)]
    assert b.num_cached_tokens == 8
    assert bm.stats().prefix_hits == 8
