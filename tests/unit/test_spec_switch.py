"""The speculation switch: a fixed limit, or per batch size whether the expected gain outweighs the measured cost."""

from trtserve.engine.speculative import AUTO_MAX_BATCH_SIZE, SpeculativeConfig
from trtserve.runtime.speculative.state import PRIOR_ACCEPTED, SpecState
from trtserve.runtime.speculative.switch import PROBE_EVERY, SpeculationSwitch


def test_a_fixed_limit_speculates_up_to_it_and_times_nothing():
    s = SpeculationSwitch(4, adaptive=False)
    assert [s.decide(b, 0.0) for b in (1, 4, 5)] == [True, True, False]
    s.observe(2, False, 0.001)
    assert s.costs(2) == (None, None)


def test_each_way_is_timed_once_first():
    s = SpeculationSwitch(8, adaptive=True)
    assert s.decide(3, 0.0)  # nothing timed: a speculating step first
    s.observe(3, True, 0.030)
    assert not s.decide(3, 100.0)  # then a plain one, whatever the gain
    s.observe(3, False, 0.020)
    assert s.costs(3) == (0.020, 0.030)
    assert not s.decide(9, 100.0)  # above the limit: never


def test_it_speculates_when_the_expected_tokens_outweigh_the_cost():
    s = SpeculationSwitch(8, adaptive=True)
    s.observe(4, True, 0.120)  # a speculating step of 4 sequences costs 4 plain ones
    s.observe(4, False, 0.030)
    # pays iff (4 + gain) * 0.030 > 4 * 0.120, i.e. gain > 12 accepted tokens over the 4 sequences
    assert [s.decide(4, g) for g in (11.9, 12.1)] == [False, True]
    s.observe(1, True, 0.033)
    s.observe(1, False, 0.018)
    assert s.decide(1, 1.0) and not s.decide(1, 0.8)  # one sequence: pays above 0.83 accepted tokens


def test_the_way_not_taken_is_retimed_every_probe_steps():
    s = SpeculationSwitch(8, adaptive=True)
    s.observe(2, True, 0.1)
    s.observe(2, False, 0.01)
    choices = [s.decide(2, 0.0) for _ in range(2 * PROBE_EVERY)]
    assert choices.count(True) == 2 and choices[PROBE_EVERY - 1] and choices[2 * PROBE_EVERY - 1]
    for _ in range(20):  # the machine got faster at verifying: the cost follows
        s.observe(2, True, 0.012)
    assert s.costs(2)[1] < 0.013 and s.decide(2, 1.0)


def test_a_sequences_expected_gain_is_its_recent_mean():
    st = SpecState()
    assert st.expected_accepted() == PRIOR_ACCEPTED
    st.record(4, 4, 0.1)
    st.record(4, 1, 0.1)
    assert st.expected_accepted() == 2.5
    for _ in range(8):
        st.record(4, 0, 0.1)  # the floor pauses it: nothing expected while paused
    assert st.paused and st.expected_accepted() == 0.0


def test_a_sequence_the_switch_held_back_expects_the_prior_again():
    st = SpecState()
    st.record(4, 0, 0.0)  # it kept nothing: not worth a verification on its own record
    assert st.expected_accepted() == 0.0
    st.idle = 8  # eight decode steps without one (the switch said no): its text may have changed
    assert st.expected_accepted() == PRIOR_ACCEPTED
    st.record(4, 3, 0.0)
    assert st.idle == 0 and st.expected_accepted() == 1.5


def test_unset_max_batch_size_is_adaptive_up_to_the_auto_limit():
    cfg = SpeculativeConfig(method="ngram")
    assert cfg.max_batch_size is None and cfg.batch_limit == AUTO_MAX_BATCH_SIZE
    assert SpeculativeConfig(method="ngram", max_batch_size=3).batch_limit == 3
