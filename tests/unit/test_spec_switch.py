"""The speculation switch: a fixed limit, or per batch size whichever measured faster, re-tried now and then."""

from trtserve.engine.speculative import AUTO_MAX_BATCH_SIZE, SpeculativeConfig
from trtserve.runtime.speculative.switch import PROBE_EVERY, SpeculationSwitch


def test_a_fixed_limit_speculates_up_to_it_and_learns_nothing():
    s = SpeculationSwitch(4, adaptive=False)
    assert [s.decide(b) for b in (1, 4, 5)] == [True, True, False]
    s.observe(2, False, 100, 0.001)
    assert s.rates(2) == (None, None)


def test_unmeasured_batch_sizes_try_speculation_then_a_plain_step():
    s = SpeculationSwitch(8, adaptive=True)
    assert s.decide(3)
    s.observe(3, True, 9, 0.1)  # 90 tok/s with proposals
    assert not s.decide(3)  # now the plain rate is missing
    s.observe(3, False, 3, 0.05)  # 60 tok/s without
    assert s.rates(3) == (60.0, 90.0)
    assert not s.decide(9)  # above the limit: never


def test_the_faster_way_wins_and_the_other_is_retried_every_probe_steps():
    s = SpeculationSwitch(8, adaptive=True)
    s.observe(4, True, 4, 0.1)  # 40 tok/s: proposals mostly rejected
    s.observe(4, False, 4, 0.05)  # 80 tok/s
    choices = [s.decide(4) for _ in range(2 * PROBE_EVERY)]
    assert choices.count(True) == 2  # one probe of speculation per PROBE_EVERY steps
    assert choices[PROBE_EVERY - 1] and choices[2 * PROBE_EVERY - 1]


def test_the_choice_follows_the_workload():
    s = SpeculationSwitch(8, adaptive=True)
    s.observe(2, True, 2, 0.1)  # 20 tok/s
    s.observe(2, False, 2, 0.04)  # 50 tok/s
    assert not s.decide(2)
    for _ in range(8):  # proposals start being kept: the speculating rate climbs past the plain one
        s.observe(2, True, 10, 0.1)
    plain, spec = s.rates(2)
    assert spec > plain and s.decide(2)


def test_unset_max_batch_size_is_adaptive_up_to_the_auto_limit():
    cfg = SpeculativeConfig(method="ngram")
    assert cfg.max_batch_size is None and cfg.batch_limit == AUTO_MAX_BATCH_SIZE
    assert SpeculativeConfig(method="ngram", max_batch_size=3).batch_limit == 3
