"""Versioned prefix namespaces in the block manager: keys rooted at (engine, salt, namespace,
version), invalidation, and the counters behind the metrics; exact block ids and ref counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trtserve.engine.request_options import RequestOptions
from trtserve.runtime.block_manager import BlockManager, PrefixScope, block_key, chain_root
from trtserve.runtime.prefix_scope import MAX_NAMESPACE_LABELS, OTHER

BS = 4
PROMPT = list(range(10, 19))  # two full blocks + 1 token: at most 2 blocks are reusable


def cached(bm: BlockManager, seq: str, scope: PrefixScope, tokens=PROMPT) -> list[int]:
    """Run a request to completion: allocate, compute every token, free (its blocks stay cached)."""
    hits = bm.lookup_prefix(tokens, scope)
    assert bm.allocate(seq, hits, len(tokens), scope)
    bm.commit(seq, tokens, len(tokens))
    table = list(bm.block_table(seq))
    bm.free(seq)
    return table


def test_a_newer_version_never_reuses_an_older_ones_blocks():
    bm = BlockManager(8, BS, "engine")
    v7, v8 = PrefixScope(namespace="docs", version=7), PrefixScope(namespace="docs", version=8)
    assert cached(bm, "a", v7) == [0, 1, 2]
    assert bm.lookup_prefix(PROMPT, v8) == []
    assert bm.version_refusals == 1
    assert bm.lookup_prefix(PROMPT, v7) == [0, 1]  # the equal version does
    assert bm.version_refusals == 1
    # v8 caches its own copy beside v7's: the LRU hands out free block 3 first (0..2 are cached)
    assert cached(bm, "b", v8) == [3, 4, 5]
    assert bm.lookup_prefix(PROMPT, v8) == [3, 4] and bm.lookup_prefix(PROMPT, v7) == [0, 1]
    s = bm.stats()
    assert (s.used, s.cached, s.free) == (0, 4, 4)
    bm.check_invariants()


def test_namespace_salt_and_engine_are_all_part_of_the_root():
    roots = {
        chain_root("engine-A", PrefixScope(None, "docs", 1)),
        chain_root("engine-B", PrefixScope(None, "docs", 1)),
        chain_root("engine-A", PrefixScope("alice", "docs", 1)),
        chain_root("engine-A", PrefixScope(None, "code", 1)),
        chain_root("engine-A", PrefixScope(None, "docs", 2)),
        chain_root("engine-A", PrefixScope(None, "docs", None)),
        chain_root("engine-A", PrefixScope(None, None, 1)),
        chain_root("engine-A", None),
    }
    assert len(roots) == 8
    # a salt cannot be chosen to collide with a namespace: the fields are kept apart
    assert chain_root("e", PrefixScope("a\0b", None)) != chain_root("e", PrefixScope("a", "b"))
    assert chain_root("e", "alice") == chain_root("e", PrefixScope(salt="alice"))
    assert block_key(chain_root("e", None), [1, 2]) != block_key(chain_root("e", None), [2, 1])


def test_unversioned_and_other_namespaces_refuse_nothing_by_version():
    bm = BlockManager(8, BS, "engine")
    cached(bm, "a", PrefixScope(namespace="docs", version=1))
    assert bm.lookup_prefix(PROMPT, PrefixScope(namespace="code", version=2)) == []
    assert bm.lookup_prefix(PROMPT, PrefixScope(namespace="docs")) == []
    assert bm.version_refusals == 0  # a different namespace or no version is not a version mismatch


def test_invalidate_frees_a_namespaces_cached_blocks_at_once():
    bm = BlockManager(8, BS, "engine")
    docs, code = PrefixScope(namespace="docs", version=1), PrefixScope(namespace="code", version=1)
    assert cached(bm, "a", docs) == [0, 1, 2]
    assert cached(bm, "b", code, [t + 100 for t in PROMPT]) == [3, 4, 5]
    assert bm.stats().cached == 4
    assert bm.invalidate("docs") == 2
    s = bm.stats()
    assert (s.used, s.cached, s.free, s.invalidations) == (0, 2, 6, 1)
    assert bm.lookup_prefix(PROMPT, docs) == []
    assert bm.lookup_prefix([t + 100 for t in PROMPT], code) == [3, 4]  # the other namespace is untouched
    # the invalidated blocks are handed out first, ahead of any block still holding a prefix
    assert bm.allocate("c", [], 8) and bm.block_table("c") == [1, 0]
    bm.check_invariants()


def test_invalidate_before_version_keeps_newer_versions():
    bm = BlockManager(12, BS, "engine")
    v1, v2, v3 = (PrefixScope(namespace="docs", version=v) for v in (1, 2, 3))
    unversioned = PrefixScope(namespace="docs")
    cached(bm, "a", v1)
    cached(bm, "b", v2)
    cached(bm, "c", v3)
    cached(bm, "d", unversioned)
    assert bm.stats().cached == 8
    assert bm.invalidate("docs", before_version=3) == 6  # v1, v2 and the unversioned blocks
    assert bm.lookup_prefix(PROMPT, v3) != []
    assert [bm.lookup_prefix(PROMPT, s) for s in (v1, v2, unversioned)] == [[], [], []]
    assert bm.stats().cached == 2
    bm.check_invariants()


def test_running_requests_keep_their_blocks_but_register_nothing_new():
    bm = BlockManager(8, BS, "engine")
    docs = PrefixScope(namespace="docs", version=1)
    long = list(range(20, 32))  # three full blocks
    assert bm.allocate("run", [], 9, docs)
    bm.commit("run", long, 9)  # blocks 0, 1 are full and cached; the request is still running
    table, refs = list(bm.block_table("run")), [bm.ref_count(b) for b in range(8)]
    assert bm.invalidate("docs") == 2
    assert bm.block_table("run") == table and [bm.ref_count(b) for b in range(8)] == refs
    assert bm.lookup_prefix(long, docs) == []
    assert bm.append_slots("run", 12)
    bm.commit("run", long, 12)  # block 2 became full after the invalidation: not registered
    assert bm.lookup_prefix(long, docs) == []
    bm.free("run")
    s = bm.stats()
    assert (s.used, s.cached, s.free) == (0, 0, 8)
    # a request that starts after the invalidation caches under the same namespace again
    cached(bm, "next", docs, long + [1])
    assert len(bm.lookup_prefix(long + [1], docs)) == 3
    bm.check_invariants()


def test_forked_children_of_an_invalidated_request_register_nothing():
    bm = BlockManager(8, BS, "engine")
    docs = PrefixScope(namespace="docs", version=1)
    assert bm.allocate("p", [], 6, docs)
    bm.invalidate("docs")
    bm.fork("p", "c", 6)
    bm.commit("c", list(range(8)), 8)
    assert bm.lookup_prefix(list(range(9)), docs) == []
    bm.free("p")
    bm.free("c")
    bm.check_invariants()


def test_hits_and_misses_are_counted_by_namespace_with_a_bounded_label_set():
    bm = BlockManager(8, BS, "engine")
    docs = PrefixScope(namespace="docs", version=1)
    cached(bm, "a", docs)  # lookup: 9 tokens, 0 hits
    bm.lookup_prefix(PROMPT, docs)  # 9 tokens, 8 hits
    bm.lookup_prefix(PROMPT, None)  # no namespace: "default"
    assert bm.stats().by_namespace == {"docs": (8, 10), "default": (0, 9)}
    for i in range(MAX_NAMESPACE_LABELS + 5):
        bm.lookup_prefix([1, 2], PrefixScope(namespace=f"n{i}"))
    labels = bm.stats().by_namespace
    assert len(labels) == MAX_NAMESPACE_LABELS + 1 and labels[OTHER][1] == 2 * 7


def test_evicting_a_versioned_head_forgets_it():
    bm = BlockManager(3, BS, "engine")
    v1, v2 = PrefixScope(namespace="docs", version=1), PrefixScope(namespace="docs", version=2)
    cached(bm, "a", v1)
    assert bm.allocate("big", [], 12)  # evicts every cached block
    bm.free("big")
    assert bm.lookup_prefix(PROMPT, v2) == [] and bm.version_refusals == 0  # nothing of v1 is left
    bm.check_invariants()


SCOPES = [PrefixScope(namespace=n, version=v) for n in ("a", "b") for v in (1, 2)] + [PrefixScope()]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "append", "free", "fork", "invalidate"]),
        st.integers(0, 4),
        st.integers(1, 20),
        st.integers(0, len(SCOPES) - 1),
    ),
    max_size=50,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_random_operations_with_namespaces_and_invalidation_keep_invariants(ops):
    bm = BlockManager(10, BS, "engine")
    tokens: dict[str, list[int]] = {}
    n = 0
    for op, rid_i, k, scope_i in ops:
        rid, scope = f"r{rid_i}", SCOPES[scope_i]
        if op == "alloc" and not bm.has(rid):
            toks = [scope_i] * 6 + list(range(k))
            if bm.allocate(rid, bm.lookup_prefix(toks, scope), len(toks), scope):
                tokens[rid] = toks
                bm.commit(rid, toks, len(toks))
        elif op == "append" and rid in tokens:
            toks = tokens[rid] + [9] * k
            if bm.append_slots(rid, len(toks)):
                tokens[rid] = toks
                bm.commit(rid, toks, len(toks))
        elif op == "fork" and rid in tokens:
            n += 1
            try:
                bm.fork(rid, f"f{n}", len(tokens[rid]))
                tokens[f"f{n}"] = list(tokens[rid])
            except MemoryError:
                pass
        elif op == "free" and rid in tokens:
            bm.free(rid)
            del tokens[rid]
        elif op == "invalidate":
            before = bm.stats()
            dropped = bm.invalidate(scope.namespace, k % 3 or None)
            after = bm.stats()
            assert after.used == before.used  # running requests keep every block
            assert after.cached + after.free == before.cached + before.free
            assert after.cached <= before.cached and dropped >= before.cached - after.cached
        bm.check_invariants()
    for r in list(tokens):
        bm.free(r)
    bm.check_invariants()
    s = bm.stats()
    assert s.used == 0 and s.free + s.cached == 10


def test_the_tensorrt_llm_backend_says_it_cannot_invalidate_or_key_by_namespace():
    import asyncio

    import pytest

    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine
    from trtserve.backends.tensorrt_llm.sampling import check_supported
    from trtserve.engine.errors import UnsupportedError, UserError
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    with pytest.raises(UnsupportedError, match="not supported by the tensorrt_llm backend"):
        asyncio.run(TrtllmEngine.invalidate_cache(object.__new__(TrtllmEngine), "docs"))
    for field in ({"cache_namespace": "docs"}, {"context_version": 3}):
        with pytest.raises(UserError, match=next(iter(field))):
            check_supported(GenerateRequest([1, 2], SamplingParams(), RequestOptions(**field)))
