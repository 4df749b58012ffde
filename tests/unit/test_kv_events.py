"""The block manager's KV events: stored, evicted, invalidated and cleared, in the order they happen."""

import torch

from trtserve.models.kv_cache import PagedKVCache
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.kv_events import BlockRemoved, BlockStored, CacheCleared
from trtserve.runtime.prefix_scope import PrefixScope, block_key, chain_root


def _manager(num_blocks=3):
    bm = BlockManager(num_blocks, 2, "fp")
    events = []
    bm.subscribe(events.append)
    return bm, events


def test_stored_events_chain_their_keys():
    bm, events = _manager()
    scope = PrefixScope(namespace="docs", version=1)
    assert bm.allocate("a", [], 5, scope)
    bm.commit("a", [1, 2, 3, 4, 5], 5)
    k1 = block_key(chain_root("fp", scope), [1, 2])
    k2 = block_key(k1, [3, 4])
    assert events == [BlockStored(k1, None, (1, 2), 0, scope), BlockStored(k2, k1, (3, 4), 1, scope)]
    bm.check_invariants()


def test_eviction_is_announced_before_the_block_is_reused():
    bm, events = _manager(num_blocks=2)
    assert bm.allocate("a", [], 4)
    bm.commit("a", [1, 2, 3, 4], 4)
    bm.free("a")  # both blocks cached and free: tail (block 1) released first, so block 1 is the LRU
    events.clear()
    assert bm.allocate("b", [], 2)
    k1 = block_key(chain_root("fp", None), [1, 2])
    assert events == [BlockRemoved(block_key(k1, [3, 4]), 1, True, PrefixScope())]
    assert bm.block_table("b") == [1]
    bm.check_invariants()


def test_invalidate_and_clear():
    bm, events = _manager()
    scope = PrefixScope(namespace="n")
    assert bm.allocate("a", [], 2, scope)
    bm.commit("a", [7, 8], 2)
    bm.free("a")
    assert bm.allocate("b", [], 2)
    bm.commit("b", [9, 9], 2)
    bm.free("b")
    events.clear()
    assert bm.invalidate("n") == 1
    assert events == [BlockRemoved(block_key(chain_root("fp", scope), [7, 8]), 0, False, scope)]
    events.clear()
    bm.clear()
    assert events == [CacheCleared()]
    assert bm.lookup_prefix([9, 9, 1], None) == []
    bm.check_invariants()


def test_blocks_read_back_bit_for_bit():
    class Cfg:
        num_hidden_layers, num_key_value_heads, head_size = 3, 2, 4

    kv = PagedKVCache(Cfg, 5, 4, torch.bfloat16, torch.device("cpu"))
    kv.data.normal_()
    other = PagedKVCache(Cfg, 5, 4, torch.bfloat16, torch.device("cpu"))
    other.write_blocks([0, 2], kv.read_blocks([3, 1]))
    for layer in range(3):
        (k, v), (k2, v2) = kv.blocks(layer), other.blocks(layer)
        assert torch.equal(k[3], k2[0]) and torch.equal(v[1], v2[2]) and torch.equal(k[1], k2[2])
    assert not other.blocks(0)[0][1].any()  # untouched blocks stay as they were
