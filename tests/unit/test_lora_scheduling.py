"""LoRA adapters in the scheduler and the block manager, over plain ints: at most max_loras adapters per
step (the others wait, the requests behind them run), pins held exactly while running, and prefix-cache
keys that include the adapter's content hash; exact block ids and ref counts."""

from __future__ import annotations

from scheduler_steps import run_step

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.adapter_cache import AdapterCache
from trtserve.runtime.block_manager import BlockManager, PrefixScope
from trtserve.runtime.features.lora import LoraGate
from trtserve.runtime.request import Request
from trtserve.runtime.scheduler import Scheduler, SchedulerConfig

BS = 4
A, B, C = (AdapterRef(n, f"sha256:{n * 8}") for n in "abc")
PROMPT = list(range(10, 19))  # two full blocks + 1 token


def make(max_loras=2, capacity=3, num_blocks=32, max_num_tokens=64):
    bm = BlockManager(num_blocks, BS, "engine")
    cache = AdapterCache(max_loras, capacity, lambda ref: f"w-{ref.name}")
    return Scheduler(SchedulerConfig(max_num_tokens, 8, 64), bm, LoraGate(cache)), bm, cache


def req(adapter, arrival, prompt=PROMPT, max_tokens=2, n=1):
    p = SamplingParams(max_tokens=max_tokens, n=n)
    return Request(SequenceId(RequestId.new()), list(prompt), p, arrival, RequestOptions(adapter=adapter))


def adapters_of(out):
    return [c.request.options.adapter.name if c.request.options.adapter else None for c in out.chunks]


def test_a_third_adapter_waits_while_requests_behind_it_run():
    s, _, cache = make(max_loras=2)
    a, b, c, base, a2 = req(A, 0), req(B, 1), req(C, 2), req(None, 3), req(A, 4, max_tokens=4)
    for r in (a, b, c, base, a2):
        s.add(r)
    out = run_step(s)  # c is passed over: a and b hold both slots; the base request and a2 (adapter a) run
    assert adapters_of(out) == ["a", "b", None, "a"]
    assert cache.active() == {A: 2, B: 1}
    assert s.waiting == [c]
    out = run_step(s)  # everything decodes; a, b and base finish (max_tokens 2): c takes a free slot next step
    assert adapters_of(out) == ["a", "b", None, "a"]
    assert cache.active() == {A: 1}
    out = run_step(s)
    assert adapters_of(out) == ["a", "c"]
    assert cache.active() == {A: 1, C: 1}
    while s.num_unfinished:
        run_step(s)
    assert cache.active() == {}
    assert (cache.resident(), cache.loads, cache.evictions) == ([B, A, C], 3, 0)


def test_preemption_and_abort_release_the_adapter():
    s, bm, cache = make(max_loras=1, num_blocks=32)
    a, b = req(A, 0, max_tokens=8), req(B, 1)
    s.add(a)
    s.add(b)
    run_step(s)
    assert cache.active() == {A: 1} and s.waiting == [b]
    s.finish(a, "abort")
    assert cache.active() == {}
    out = run_step(s)
    assert adapters_of(out) == ["b"] and cache.active() == {B: 1}
    out = s.schedule()  # preempt b by hand, as the scheduler does when blocks run out
    s._preempt(b, out)
    assert cache.active() == {} and s.waiting == [b]
    bm.check_invariants()


def test_forked_children_hold_their_parents_adapter():
    s, _, cache = make()
    parent = req(A, 0, n=3)
    s.add(parent)
    run_step(s)
    for i in (1, 2):
        params = parent.params.model_copy(update={"n": 1})
        child = Request(SequenceId(parent.seq.request, i), PROMPT, params, 0, parent.options)
        s.fork(parent, child)
    assert cache.active() == {A: 3}


def test_prefix_blocks_are_keyed_by_the_adapter_hash():
    """Exact block accounting: a prompt cached under adapter a is a hit for a only; b and the base
    compute (and cache) their own copies; the same name with other weights is another adapter."""
    bm = BlockManager(12, BS, "engine")
    scopes = {
        name: PrefixScope(adapter=h) for name, h in [("a", A.content_hash), ("b", B.content_hash), ("base", None)]
    }

    def run(seq, scope):
        hits = bm.lookup_prefix(PROMPT, scope)
        assert bm.allocate(seq, hits, len(PROMPT), scope)
        bm.commit(seq, PROMPT, len(PROMPT))
        table = list(bm.block_table(seq))
        bm.free(seq)
        return hits, table

    assert run("a1", scopes["a"]) == ([], [0, 1, 2])
    assert run("b1", scopes["b"]) == ([], [3, 4, 5])  # a's two full blocks are no hit for b
    assert run("base1", scopes["base"]) == ([], [6, 7, 8])  # nor for the base model
    assert run("a2", scopes["a"]) == ([0, 1], [0, 1, 9])  # a's own: both full blocks
    assert run("b2", scopes["b"]) == ([3, 4], [3, 4, 10])
    assert run("base2", scopes["base"]) == ([6, 7], [6, 7, 11])
    reloaded = PrefixScope(adapter="sha256:" + "d" * 8)  # adapter a reloaded with other weights
    assert bm.lookup_prefix(PROMPT, reloaded) == []
    s = bm.stats()
    assert (s.used, s.cached, s.free) == (0, 6, 6)
    assert (s.prefix_queries, s.prefix_hits) == (7 * len(PROMPT), 3 * 2 * BS)
    bm.check_invariants()
