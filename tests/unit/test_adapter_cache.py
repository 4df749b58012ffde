"""The adapter cache over plain names: LRU eviction, pinning by running requests, max_active slots,
reload on demand; exact state after every operation."""

from __future__ import annotations

import pytest

from trtserve.runtime.adapter_cache import AdapterCache


def make(max_active=2, capacity=3):
    loaded = []  # the load calls, in order

    def load(ref):
        if ref == "broken":
            raise OSError("gone")
        loaded.append(ref)
        return f"w-{ref}-{len(loaded)}"

    return AdapterCache(max_active, capacity, load), loaded


def state(c: AdapterCache):
    return c.resident(), c.active(), (c.loads, c.evictions, c.hits)


def test_acquire_loads_once_pins_and_release_makes_it_most_recent():
    c, loaded = make()
    assert c.acquire("a") and c.acquire("a")  # two requests of a: one load
    assert state(c) == (["a"], {"a": 2}, (1, 0, 1))
    assert c.weights("a") == "w-a-1"
    assert c.acquire("b")
    assert state(c) == (["a", "b"], {"a": 2, "b": 1}, (2, 0, 1))
    c.release("a")
    assert state(c) == (["a", "b"], {"a": 1, "b": 1}, (2, 0, 1))
    c.release("a")  # a's last request: unpinned, now the most recently used
    assert state(c) == (["b", "a"], {"b": 1}, (2, 0, 1))
    with pytest.raises(KeyError):
        c.weights("a")  # weights are handed out for active adapters only
    assert loaded == ["a", "b"]


def test_at_most_max_active_adapters_are_active():
    c, _ = make(max_active=2)
    assert c.acquire("a") and c.acquire("b")
    assert not c.can_acquire("c") and not c.acquire("c")  # no change
    assert state(c) == (["a", "b"], {"a": 1, "b": 1}, (2, 0, 0))
    assert c.can_acquire("a") and c.acquire("a")  # an active one takes more requests
    c.release("b")
    assert c.acquire("c")
    assert state(c) == (["a", "b", "c"], {"a": 2, "c": 1}, (3, 0, 1))


def test_a_full_cache_evicts_the_least_recently_used_unpinned_and_reloads_it_on_demand():
    c, loaded = make(max_active=2, capacity=2)
    c.preload("a")
    c.preload("b")
    assert c.acquire("a")  # a pinned (a hit); b is the only evictable one
    assert state(c) == (["b", "a"], {"a": 1}, (2, 0, 1))
    assert c.acquire("c")  # evicts b, not the older-loaded but pinned a
    assert state(c) == (["a", "c"], {"a": 1, "c": 1}, (3, 1, 1))
    c.release("c")
    c.release("a")
    assert state(c) == (["c", "a"], {}, (3, 1, 1))
    assert c.acquire("b")  # reloaded from its dir, evicting c (least recently released)
    assert state(c) == (["a", "b"], {"b": 1}, (4, 2, 1))
    assert loaded == ["a", "b", "c", "b"]
    assert c.weights("b") == "w-b-4"  # the reloaded weights


def test_a_failed_load_changes_nothing_and_drop_refuses_pinned_adapters():
    c, _ = make(max_active=2, capacity=2)
    c.preload("a")
    c.preload("b")
    with pytest.raises(OSError):
        c.acquire("broken")
    assert state(c) == (["a", "b"], {}, (2, 0, 0))  # nothing evicted for a load that failed
    assert c.acquire("a")
    with pytest.raises(ValueError, match="in use by 1 running requests"):
        c.drop("a")
    c.drop("b")
    assert state(c) == (["a"], {"a": 1}, (2, 0, 1))


def test_capacity_below_max_active_is_refused():
    with pytest.raises(ValueError, match="capacity"):
        AdapterCache(3, 2, lambda ref: ref)
