"""The dynamic batcher's queue and batch forming (trtserve/tensor/batcher.py) over plain values and an
injected clock: exact batches, waits and rejections, as Triton core's DynamicBatchScheduler forms them."""

from __future__ import annotations

import pytest

from trtserve.tensor.batcher import Batcher
from trtserve.tensor.types import DynamicBatching, QueueFull, QueuePolicy


def batcher(max_batch_size=8, batching=True, **kw) -> Batcher:
    return Batcher(max_batch_size, DynamicBatching(**kw) if batching else None)


def add(b: Batcher, *names, size=1, key="k", now=0.0, priority=0, timeout_us=None):
    return [b.enqueue(n, size, key, now, priority, timeout_us) for n in names]


def batches(b: Batcher, now=0.0) -> list[list[str]]:
    """Every batch the queue yields at `now`, in order, until it yields none."""
    out = []
    while (d := b.next_batch(now)).batch:
        out.append([p.item for p in d.batch])
    return out


def test_without_dynamic_batching_every_request_runs_alone_in_arrival_order():
    b = batcher(batching=False)
    add(b, "a", "b", "c")
    assert batches(b) == [["a"], ["b"], ["c"]]
    d = b.next_batch(0.0)
    assert (d.batch, d.rejected, d.wait) == ([], [], None)


def test_a_model_without_a_batch_dim_runs_requests_alone_even_with_dynamic_batching():
    b = batcher(max_batch_size=0)
    add(b, "a", "b")
    assert batches(b) == [["a"], ["b"]]


def test_batches_are_as_large_as_max_batch_size_allows():
    b = batcher(max_batch_size=4)
    add(b, *"abcde")
    assert batches(b) == [["a", "b", "c", "d"], ["e"]]


def test_batch_elements_not_requests_count_against_max_batch_size():
    b = batcher(max_batch_size=6)
    add(b, "a", "b", size=3)
    add(b, "c", size=2)
    assert batches(b) == [["a", "b"], ["c"]]


def test_the_largest_preferred_size_that_can_be_formed_goes_first():
    b = batcher(preferred_batch_size=(2, 4))
    add(b, *"abcdefg")
    assert batches(b) == [["a", "b", "c", "d"], ["e", "f"], ["g"]]


def test_a_request_that_would_overshoot_every_preferred_size_is_left_for_the_next_batch():
    b = batcher(preferred_batch_size=(4,))
    add(b, "a", size=2)
    add(b, "b", size=1)
    add(b, "c", size=2)  # 2 + 1 + 2 = 5 > 4: Triton sends a, b (3 elements)
    assert batches(b) == [["a", "b"], ["c"]]


def test_the_queue_delay_holds_a_small_batch_until_the_oldest_request_has_waited_it():
    b = batcher(max_batch_size=4, max_queue_delay_us=1000)
    add(b, "a", now=0.0)
    d = b.next_batch(0.0004)
    assert d.batch == [] and d.wait == pytest.approx(0.0006)
    add(b, "b", now=0.0006)
    d = b.next_batch(0.0009)
    assert d.batch == [] and d.wait == pytest.approx(0.0001)
    assert [p.item for p in b.next_batch(0.001).batch] == ["a", "b"]


def test_a_full_or_preferred_batch_does_not_wait_for_the_delay():
    full = batcher(max_batch_size=3, max_queue_delay_us=10**6)
    add(full, *"abcd")
    assert [p.item for p in full.next_batch(0.0).batch] == ["a", "b", "c"]
    preferred = batcher(preferred_batch_size=(2,), max_queue_delay_us=10**6)
    add(preferred, *"ab")
    assert [p.item for p in preferred.next_batch(0.0).batch] == ["a", "b"]


def test_past_the_delay_everything_pending_goes_rather_than_the_preferred_size():
    before = batcher(preferred_batch_size=(2,), max_queue_delay_us=1000)
    add(before, *"abc")
    assert [p.item for p in before.next_batch(0.0005).batch] == ["a", "b"]
    after = batcher(preferred_batch_size=(2,), max_queue_delay_us=1000)
    add(after, *"abc")
    assert [p.item for p in after.next_batch(0.001).batch] == ["a", "b", "c"]


def test_a_request_with_other_non_batch_shapes_ends_the_batch_and_starts_the_next():
    b = batcher()
    add(b, "a", "b", key=(("x", (3,)),))
    add(b, "c", key=(("x", (5,)),))
    add(b, "d", key=(("x", (3,)),))
    assert batches(b) == [["a", "b"], ["c"], ["d"]]


def test_a_shape_change_sends_the_pending_batch_without_waiting_for_the_delay():
    b = batcher(max_queue_delay_us=10**6)
    add(b, "a", key="A")
    add(b, "b", key="B")
    assert [p.item for p in b.next_batch(0.0).batch] == ["a"]
    d = b.next_batch(0.0)  # "b" alone now waits for company
    assert d.batch == [] and d.wait == pytest.approx(1.0)


def test_higher_priority_levels_go_first_and_level_0_means_the_default_level():
    b = batcher(max_batch_size=1, priority_levels=2, default_priority_level=2)
    add(b, "a", priority=0)  # -> 2
    add(b, "b", priority=2)
    add(b, "c", priority=1)
    add(b, "d", priority=7)  # past the last level -> 2
    assert batches(b) == [["c"], ["a"], ["b"], ["d"]]
    assert [b.level_of(p) for p in (0, 1, 2, 3)] == [2, 1, 2, 2]


def test_a_batch_takes_the_highest_levels_first_and_goes_on_into_lower_ones():
    b = batcher(max_batch_size=3, priority_levels=2, default_priority_level=2)
    add(b, "a", "b", priority=2)
    add(b, "c", "d", priority=1)
    assert batches(b) == [["c", "d", "a"], ["b"]]


def test_a_full_queue_refuses_at_once_per_level():
    policy = QueuePolicy(max_queue_size=2)
    b = batcher(
        priority_levels=2,
        default_priority_level=2,
        default_queue_policy=policy,
        priority_queue_policy={1: QueuePolicy(max_queue_size=1)},
    )
    add(b, "a", "b", priority=2)
    with pytest.raises(QueueFull, match="Exceeds maximum queue size"):
        add(b, "c", priority=2)
    add(b, "d", priority=1)
    with pytest.raises(QueueFull, match="Exceeds maximum queue size"):
        add(b, "e", priority=1)
    assert len(b) == 3
    b.next_batch(0.0)
    add(b, "f", priority=2)  # room again once the queue drained


def test_reject_drops_a_request_that_waited_past_its_timeout():
    b = batcher(max_batch_size=1, default_queue_policy=QueuePolicy(default_timeout_us=1000))
    add(b, "a", now=0.0)
    add(b, "b", now=0.0005)
    assert b.expire(0.001) == []  # at the deadline, not yet past it
    assert [p.item for p in b.expire(0.0011)] == ["a"]
    d = b.next_batch(0.0016)
    assert [p.item for p in d.rejected] == ["b"] and d.batch == [] and len(b) == 0


def test_delay_moves_a_timed_out_request_behind_the_others_of_its_level_only():
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_us=1000)
    b = batcher(max_batch_size=1, priority_levels=2, default_priority_level=1, default_queue_policy=policy)
    add(b, "a", now=0.0, priority=1)
    add(b, "b", now=0.0008, priority=1)
    add(b, "c", now=0.0008, priority=2)
    d = b.next_batch(0.0015)  # a timed out: behind b, still ahead of level 2
    assert d.rejected == [] and [p.item for p in d.batch] == ["b"]
    assert batches(b, now=0.0015) == [["a"], ["c"]]


def test_a_delayed_request_still_batches_with_the_others():
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_us=1000)
    b = batcher(max_batch_size=4, default_queue_policy=policy)
    add(b, "a", now=0.0)
    add(b, "b", "c", now=0.001)
    assert batches(b, now=0.0015) == [["b", "c", "a"]]


@pytest.mark.parametrize(
    ("default_us", "override", "asked_us", "deadline"),
    [
        (1000, True, 500, 0.0005),  # shorter: honoured
        (1000, True, 5000, 0.001),  # longer: the default stands
        (1000, False, 500, 0.001),  # not allowed
        (0, True, 500, None),  # Triton: no default timeout, nothing to shorten
        (1000, True, None, 0.001),
    ],
)
def test_a_request_may_only_shorten_the_timeout_and_only_when_allowed(default_us, override, asked_us, deadline):
    policy = QueuePolicy(default_timeout_us=default_us, allow_timeout_override=override)
    b = batcher(default_queue_policy=policy)
    (p,) = add(b, "a", timeout_us=asked_us)
    assert p.deadline == (pytest.approx(deadline) if deadline else None)


def test_without_dynamic_batching_there_is_no_queue_policy():
    b = batcher(batching=False)
    (p,) = add(b, "a", timeout_us=10)
    assert p.deadline is None


def test_the_wait_ends_at_the_nearest_queue_timeout():
    b = batcher(max_queue_delay_us=10**6, default_queue_policy=QueuePolicy(default_timeout_us=100_000))
    add(b, "a")
    assert b.next_batch(0.02).wait == pytest.approx(0.08)


def test_removed_requests_leave_the_queue_and_drain_empties_it_in_order():
    b = batcher(priority_levels=2, default_priority_level=2)
    a, bb, c = add(b, "a", "b", "c", priority=2)
    (d,) = add(b, "d", priority=1)
    assert b.remove(bb) and not b.remove(bb)
    assert [p.item for p in b.drain()] == ["d", "a", "c"]
    assert len(b) == 0 and b.next_batch(0.0).batch == []
