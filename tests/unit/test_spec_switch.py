"""The speculation switch: a fixed limit, or per sequence whether its expected gain outweighs the measured cost."""

import pytest

from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.messages import SamplingParams
from trtserve.engine.speculative import AUTO_MAX_BATCH_SIZE, SpeculativeConfig
from trtserve.runtime.request import Request
from trtserve.runtime.speculative.speculator import Speculator
from trtserve.runtime.speculative.state import PRIOR_ACCEPTED, SpecState
from trtserve.runtime.speculative.switch import EVERYONE, PROBE, PROBE_EVERY, SpeculationSwitch


def test_a_fixed_limit_lets_every_sequence_speculate_up_to_it_and_times_nothing():
    s = SpeculationSwitch(4)
    assert [s.bar(b) for b in (1, 4, 5)] == [EVERYONE, EVERYONE, None]
    s.observe(2, 0, 0.001)
    assert s.costs(2) == (None, None)


def test_a_plain_step_is_timed_first_then_one_where_everyone_proposes():
    s = SpeculationSwitch(None)
    assert s.bar(3) is None  # nothing timed: a plain step first
    s.observe(3, 0, 0.020)
    assert s.bar(3) == EVERYONE  # then one where every sequence proposes
    s.observe(3, 12, 0.032)  # 12 proposal rows added 12 ms
    assert s.costs(3) == (0.020, 0.001)
    assert s.bar(9) is None  # no limit, but nothing timed at 9 yet: a plain step first


def test_the_bar_is_a_rows_cost_at_the_plain_rate():
    s = SpeculationSwitch(None)
    s.observe(4, 0, 0.030)
    s.observe(4, 16, 0.078)  # a proposal row costs 3 ms: 4 sequences' plain step makes 4 tokens in 30 ms
    assert s.bar(4) == pytest.approx(0.003 * 4 / 0.030)  # 0.4 accepted tokens per proposal
    s.observe(1, 0, 0.018)
    s.observe(1, 4, 0.022)
    assert s.bar(1) == pytest.approx(0.001 / 0.018)  # alone, a row is nearly free: almost any hope pays


def test_the_way_not_taken_is_retimed_every_probe_steps():
    s = SpeculationSwitch(None)
    s.observe(2, 0, 0.010)
    s.observe(2, 8, 0.050)
    s.observe(2, 0, 0.010)  # steps have been plain: the probe lets one sequence propose
    bars = [s.bar(2) for _ in range(PROBE_EVERY)]
    assert bars.count(PROBE) == 1 and bars[-1] == PROBE
    s.observe(2, 4, 0.014)  # the probe: rows got cheaper, the cost follows
    assert s.costs(2)[1] == pytest.approx(0.005 + 0.25 * (0.001 - 0.005))
    bars = [s.bar(2) for _ in range(PROBE_EVERY)]
    assert bars[-1] is None  # the last step timed speculated: the probe is a plain step


def test_sequences_speculate_by_their_own_expected_gain():
    spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=4))
    quoting, chatting = _running([5, 6, 7, 5, 6, 7, 5, 6]), _running([1, 2, 3, 4, 1, 2, 3])
    quoting.spec, chatting.spec = SpecState(), SpecState()
    quoting.spec.record(4, 4, 0.0)
    chatting.spec.record(4, 0, 0.0)
    spec.switch.observe(2, 0, 0.020)
    spec.switch.observe(2, 8, 0.060)  # a row costs 5 ms: the bar is 0.5 accepted tokens per proposal
    spec.plan([quoting, chatting], waiting=1)  # a request waits: every accepted token frees room for it
    assert spec.draft(quoting, 4) == [7, 5, 6, 7] and spec.draft(chatting, 4) == []
    assert chatting.spec.idle == 1 and quoting.spec.idle == 0
    assert spec.draft(quoting, 2) == [7, 5]  # within the step's budget
    fixed = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=4, max_batch_size=8))
    fixed.plan([quoting, chatting])  # a fixed limit: everyone with a guess proposes
    assert fixed.draft(chatting, 4) == [4, 1, 2, 3]


def test_with_nothing_waiting_only_the_batchs_longest_sequences_gain():
    spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=4))
    long, short = _running([5, 6, 7, 5, 6, 7, 5, 6]), _running([5, 6, 7, 5, 6, 7, 5, 6], max_tokens=8)
    for r in (long, short):
        r.spec = SpecState()
        r.spec.record(4, 3, 0.0)  # keeps 3 of 4: clears the 0.5 bar alone, not when two share the batch's end
    spec.switch.observe(2, 0, 0.020)
    spec.switch.observe(2, 8, 0.060)
    spec.plan([long, short])  # nothing waits: the batch ends with `long`; `short` finishing sooner frees nothing
    assert spec.draft(long, 4) == [7, 5, 6, 7] and spec.draft(short, 4) == []
    tied = _running([5, 6, 7, 5, 6, 7, 5, 6])
    tied.spec = SpecState()
    tied.spec.record(4, 3, 0.0)
    spec.plan([long, tied])  # two end together: each one's tokens are worth half the step they save
    assert spec.draft(long, 4) == spec.draft(tied, 4) == []
    spec.plan([long, tied], waiting=2)  # a queue takes any freed slot: each token counts in full
    assert spec.draft(long, 4) == spec.draft(tied, 4) == [7, 5, 6, 7]


def _running(token_ids, max_tokens: int = 16):
    """A sequence decoding its next token after token_ids."""
    r = Request(SequenceId(RequestId.new()), list(token_ids), SamplingParams(max_tokens=max_tokens), 0)
    r.num_computed_tokens = len(token_ids) - 1
    return r


class _Scripted:
    """Proposes k tokens for every sequence."""

    def propose_batch(self, asks):
        return [[0] * k for _, k, _ in asks]

    def forget(self, seq):
        pass


def _step_seconds(rows: int) -> float:
    """A device whose step reads the weights (20 ms) and computes 1 ms a row past 16 rows, 0.2 ms before."""
    return 0.020 + 0.0002 * min(rows, 16) + 0.001 * max(rows - 16, 0)


@pytest.mark.parametrize("quoting_share", [1.0, 0.5, 0.0])
def test_no_throughput_cliff_as_the_batch_grows(quoting_share):
    """Simulated on a device with a known cost: at every batch size the switch's throughput is at least the
    plain engine's (less the timing of the way not taken) and never drops as one more sequence runs, all
    quoting, half or none; quoting sequences alone gain most."""
    k, steps = 4, 400
    gains = []
    for batch in range(1, 13):
        spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=k), _Scripted())
        running = [_running([1, 2, 3]) for _ in range(batch)]
        quoting = {id(r) for r in running[: round(quoting_share * batch)]}  # keep every proposal; others none
        tokens, seconds = 0, 0.0
        for _ in range(steps):
            spec.plan(running, waiting=1)  # an open system: no sequence ends, as if requests always waited
            drafts = [spec.draft(r, k) for r in running]
            for r, d in zip(running, drafts, strict=True):
                kept = len(d) if id(r) in quoting else 0
                if d:
                    spec.record(r, len(d), kept)
                tokens += 1 + kept
            t = _step_seconds(batch + sum(map(len, drafts)))
            spec.switch.observe(batch, sum(map(len, drafts)), t)
            seconds += t
        gains.append((tokens / seconds) / (batch / _step_seconds(batch)))
    assert min(gains) >= 0.95, gains
    throughput = [g * b / _step_seconds(b) for b, g in enumerate(gains, 1)]
    assert all(b >= 0.95 * a for a, b in zip(throughput, throughput[1:], strict=False)), throughput  # no cliff
    if quoting_share == 1.0:
        assert gains[0] > 3.0, gains  # one quoting sequence: nearly k + 1 tokens a step


def test_a_sequences_expected_gain_is_its_recent_mean():
    st = SpecState()
    assert st.expected_accepted() == PRIOR_ACCEPTED
    st.record(4, 4, 0.1)
    st.record(4, 1, 0.1)
    assert st.expected_accepted() == 2.5
    for _ in range(8):
        st.record(4, 0, 0.1)  # the floor pauses it: nothing expected while paused
    assert st.paused and st.expected_accepted() == 0.0


def test_a_probe_tries_the_sequence_held_back_longest_and_no_other():
    spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=4), _Scripted())
    a, b = _running([1, 2, 3]), _running([1, 2, 3])
    for r, idle in ((a, 3), (b, 9)):
        r.spec = SpecState()
        r.spec.record(4, 0, 0.0)  # kept nothing: not worth a verification on its own record
        r.spec.idle = idle
    spec.switch.observe(2, 0, 0.02)
    spec.switch.observe(2, 8, 0.03)
    spec.switch.observe(2, 0, 0.02)  # the last step timed was plain: the probe lets one sequence propose
    for _ in range(PROBE_EVERY - 1):
        spec.plan([a, b])
        assert spec.draft(a, 4) == spec.draft(b, 4) == []
    spec.plan([a, b])
    assert [len(spec.draft(r, 4)) for r in (a, b)] == [0, 4]  # b, held back longest
    spec.record(b, 4, 4)
    assert b.spec.idle == 0 and b.spec.expected_accepted() == 2.0


def test_unset_max_batch_size_is_adaptive_at_every_batch_size():
    cfg = SpeculativeConfig(method="ngram")
    spec = Speculator(cfg, _Scripted())
    assert cfg.max_batch_size is None and spec.switch.adaptive and spec.switch.max_batch_size is None
    assert cfg.batch_limit == AUTO_MAX_BATCH_SIZE  # what a backend without the switch (TensorRT-LLM) is given
    assert SpeculativeConfig(method="ngram", max_batch_size=3).batch_limit == 3


def test_a_steps_proposals_stay_within_the_fast_decode_steps_rows():
    spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=4, max_batch_size=8), _Scripted(), 10)
    running = [_running([1, 2, 3]) for _ in range(3)]
    spec.plan(running)
    assert [len(spec.draft(r, 4)) for r in running] == [4, 3, 0]  # 3 rows + 7 proposals = 10


def test_rows_a_guess_did_not_use_go_to_the_next_sequence():
    spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=4, max_batch_size=8), step_rows=7)
    none, repeats, last = _running([1, 2, 3]), _running([5, 6, 5]), _running([7, 8, 7])
    spec.plan([none, repeats, last])  # 3 rows + 4 proposals: the first has no guess, so the second proposes
    assert [spec.draft(r, 4) for r in (none, repeats, last)] == [[], [6, 5, 6, 5], []]
    assert last.spec.idle == 1  # no rows were left for it
