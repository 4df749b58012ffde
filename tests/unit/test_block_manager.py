"""Block manager: exact block ids, ref counts, prefix reuse, LRU eviction, and random-op invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trtserve.runtime.block_manager import BlockManager

BS = 4


def test_allocate_append_free_exact_ids():
    bm = BlockManager(8, BS, "engine")
    assert bm.allocate("a", [], 6)
    assert bm.block_table("a") == [0, 1]
    assert bm.append_slots("a", 9)
    assert bm.block_table("a") == [0, 1, 2]
    assert bm.allocate("b", [], 4) and bm.block_table("b") == [3]
    s = bm.stats()
    assert (s.used, s.free, s.cached) == (4, 4, 0)
    assert s.waste == (16 - 13) / 16
    bm.free("a")
    assert bm.num_free_blocks == 7
    bm.check_invariants()


def test_allocation_fails_without_change_when_blocks_run_out():
    bm = BlockManager(3, BS, "engine")
    assert bm.allocate("a", [], 8)
    assert not bm.allocate("b", [], 8)
    assert not bm.has("b")
    assert not bm.append_slots("a", 13)
    assert bm.block_table("a") == [0, 1]
    bm.check_invariants()


def test_prefix_hits_share_blocks_and_count_refs():
    bm = BlockManager(8, BS, "engine")
    prompt = list(range(10))  # two full blocks + 2 tokens
    assert bm.lookup_prefix(prompt, None) == []
    bm.allocate("a", [], 10)
    bm.commit("a", prompt, 10)
    hits = bm.lookup_prefix(prompt, None)
    assert hits == [0, 1]
    bm.allocate("b", hits, 10)
    assert bm.block_table("b")[:2] == [0, 1] and bm.ref_count(0) == 2
    s = bm.stats()
    assert (s.prefix_queries, s.prefix_hits) == (20, 8)
    bm.free("a")
    bm.free("b")
    s = bm.stats()
    assert (s.used, s.cached, s.free) == (0, 2, 6)
    # still reusable after both finished
    assert bm.lookup_prefix(prompt, None) == [0, 1]
    bm.check_invariants()


def test_last_token_is_never_served_from_cache():
    bm = BlockManager(8, BS, "engine")
    prompt = list(range(8))
    bm.allocate("a", [], 8)
    bm.commit("a", prompt, 8)
    assert bm.lookup_prefix(prompt, None) == [0]  # block 1 holds the last token: recomputed


def test_salt_and_engine_namespace_never_hit_old_blocks():
    bm = BlockManager(8, BS, "engine-A")
    prompt = list(range(9))
    bm.allocate("a", [], 9, salt="alice")
    bm.commit("a", prompt, 9)
    bm.free("a")
    assert bm.lookup_prefix(prompt, "alice") == [0, 1]
    assert bm.lookup_prefix(prompt, "bob") == []
    assert bm.lookup_prefix(prompt, None) == []
    other = BlockManager(8, BS, "engine-B")
    other.allocate("a", [], 9, salt="alice")
    other.commit("a", prompt, 9)
    assert other.lookup_prefix(prompt, "alice") == [0, 1]
    from trtserve.runtime.block_manager import block_key, chain_root

    assert block_key(chain_root("engine-A", "alice"), prompt[:4]) != block_key(
        chain_root("engine-B", "alice"), prompt[:4]
    )


def test_eviction_is_least_recently_used():
    bm = BlockManager(4, BS, "engine")
    for rid, base in (("a", 0), ("b", 100)):
        toks = list(range(base, base + 5))
        bm.allocate(rid, [], 5)
        bm.commit(rid, toks, 5)
    bm.free("a")  # a's blocks released first: [1, 0] (tail first)
    bm.free("b")  # then b's: [3, 2]
    assert bm.stats().cached == 2
    assert bm.allocate("c", [], 4)  # takes the least recently released block: a's tail, then a's head
    assert bm.block_table("c") == [1]
    assert bm.lookup_prefix(list(range(5)), None) == [0]
    assert bm.allocate("d", [], 4) and bm.block_table("d") == [0]  # evicts a's cached head
    assert bm.lookup_prefix(list(range(5)), None) == []
    assert bm.lookup_prefix(list(range(100, 105)), None) == [2]  # b untouched
    bm.check_invariants()


def test_fork_shares_full_blocks_and_copies_the_partial_one():
    bm = BlockManager(8, BS, "engine")
    bm.allocate("p", [], 6)
    copies = bm.fork("p", "c", 6)
    assert bm.block_table("c") == [0, 2] and copies == [(1, 2)]
    assert bm.ref_count(0) == 2 and bm.ref_count(1) == 1
    bm.free("p")
    bm.free("c")
    assert bm.num_free_blocks == 8
    bm.check_invariants()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "append", "commit", "fork", "free", "abort"]),
        st.integers(0, 5),
        st.integers(1, 30),
        st.integers(0, 2),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_random_operations_keep_invariants_and_never_leak(ops):
    bm = BlockManager(12, BS, "engine")
    tokens: dict[str, list[int]] = {}
    n = 0
    for op, rid_i, k, prefix in ops:
        rid = f"r{rid_i}"
        if op == "alloc" and not bm.has(rid):
            toks = [prefix] * 5 + list(range(k))  # shared-prefix families
            hits = bm.lookup_prefix(toks, None)
            if bm.allocate(rid, hits, len(toks)):
                tokens[rid] = toks
                bm.commit(rid, toks, len(toks))
        elif op == "append" and bm.has(rid):
            toks = tokens[rid] + [7] * k
            if bm.append_slots(rid, len(toks)):
                tokens[rid] = toks
                bm.commit(rid, toks, len(toks))
        elif op == "fork" and bm.has(rid):
            n += 1
            child = f"f{n}"
            try:
                bm.fork(rid, child, len(tokens[rid]))
                tokens[child] = list(tokens[rid])
            except MemoryError:
                pass
        elif op in ("free", "abort"):
            for r in [r for r in tokens if r == rid or (op == "abort" and r.startswith("f"))]:
                bm.free(r)
                del tokens[r]
        bm.check_invariants()
    for r in list(tokens):
        bm.free(r)
    bm.check_invariants()
    s = bm.stats()
    assert s.used == 0 and s.free + s.cached == 12
