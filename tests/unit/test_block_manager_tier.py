"""The block manager's side of the second KV tier, over plain ints: a lookup that runs past the cache's
own blocks restores what the tier holds into free blocks, which join the cache as if computed; the
first tier's hits are never evicted for them; one free block is left; a refused block stops the chain."""

from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.kv_events import BlockRemoved, BlockStored
from trtserve.runtime.prefix_scope import PrefixScope, block_key, chain_root


class Tier:
    """Holds keys; `restore` records (key, block) and refuses the keys in `damaged`."""

    def __init__(self, keys=(), damaged=()):
        self.keys, self.damaged, self.restored = set(keys), set(damaged), []

    def holds(self, key):
        return key in self.keys

    def restore(self, key, block):
        if key in self.damaged:
            self.keys.discard(key)
            return False
        self.restored.append((key, block))
        return True


def keys(tokens, n, bs=2):
    key, out = chain_root("fp", None), []
    for i in range(n):
        key = block_key(key, tokens[i * bs : (i + 1) * bs])
        out.append(key)
    return out


PROMPT = [1, 2, 3, 4, 5, 6, 7]  # 3 full blocks of 2 can be hits, the last token's is computed


def test_a_lookup_continues_into_the_tier_and_the_blocks_count_as_cached():
    bm = BlockManager(6, 2, "fp")
    k = keys(PROMPT, 3)
    assert bm.allocate("a", [], 2) and bm.commit("a", PROMPT[:2], 2) is None
    bm.free("a")  # block 0 holds the first block's prefix
    events = []
    bm.subscribe(events.append)
    tier = Tier(k[1:])
    bm.second_tier = tier
    hits = bm.lookup_prefix(PROMPT, None)
    assert hits[0] == 0 and len(hits) == 3 and tier.restored == [(k[1], hits[1]), (k[2], hits[2])]
    assert [e for e in events if isinstance(e, BlockStored)] == [
        BlockStored(k[1], k[0], (3, 4), hits[1], PrefixScope()),
        BlockStored(k[2], k[1], (5, 6), hits[2], PrefixScope()),
    ]
    assert bm.prefix_hits == 6 and bm.stats().cached == 3  # restored blocks are cached and free
    bm.check_invariants()
    assert bm.allocate("b", hits, len(PROMPT)) and bm.block_table("b")[:3] == hits
    bm.check_invariants()


def test_hits_are_not_evicted_and_one_free_block_is_left():
    bm = BlockManager(3, 2, "fp")
    k = keys(PROMPT, 3)
    assert bm.allocate("a", [], 2)
    bm.commit("a", PROMPT[:2], 2)
    bm.free("a")
    events = []
    bm.subscribe(events.append)
    bm.second_tier = Tier(k[1:])
    hits = bm.lookup_prefix(PROMPT, None)
    assert hits == [0, hits[1]] and len(hits) == 2  # 3 blocks: the hit, one restored, one left free
    assert not any(isinstance(e, BlockRemoved) and e.block == 0 for e in events)
    assert bm.num_free_blocks == 3 and bm.stats().cached == 2
    bm.check_invariants()


def test_a_refused_block_stops_the_chain_and_its_block_stays_free():
    bm = BlockManager(6, 2, "fp")
    k = keys(PROMPT, 3)
    tier = Tier(k, damaged={k[1]})
    bm.second_tier = tier
    hits = bm.lookup_prefix(PROMPT, None)
    assert len(hits) == 1 and tier.restored == [(k[0], hits[0])]
    assert bm.prefix_hits == 2 and bm.stats().cached == 1 and bm.num_free_blocks == 6
    bm.check_invariants()
