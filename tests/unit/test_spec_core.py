"""Speculative decoding's core over plain ints: prompt lookup, KV slot rollback, the scheduler's
proposal budget, the switch-off, and the acceptance rule against the exact distribution."""

from __future__ import annotations

import pytest
import torch

from trtserve.cli.speculative import merged
from trtserve.engine.errors import UserError
from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.speculative import SpeculativeConfig
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.features.speculation import Speculation
from trtserve.runtime.request import Request
from trtserve.runtime.sampler import SampleRow
from trtserve.runtime.scheduler import Scheduler, SchedulerConfig
from trtserve.runtime.speculative.proposer import NgramProposer
from trtserve.runtime.speculative.speculator import Speculator
from trtserve.runtime.speculative.state import RETRY_STEPS, WINDOW, SpecState
from trtserve.runtime.speculative.verify import verify

BS = 4


def test_ngram_proposes_what_followed_the_most_recent_longest_match():
    p = NgramProposer(1, 3)
    assert p.propose([1, 2, 3, 4, 1, 2], 4) == [3, 4, 1, 2]
    assert p.propose([5, 1, 2, 9, 1, 2], 2) == [9, 1]  # [9, 1, 2] never occurred before: n = 2 matches
    assert p.propose([1, 2, 8, 3, 2], 2) == [8, 3]  # n = 1: the most recent earlier 2
    assert p.propose([1, 9, 2, 7, 1, 2], 1) == [7]  # [1, 2] is not there; the most recent 2 is
    assert p.propose([1, 2, 3], 2) == []
    assert p.propose([7, 7], 3) == [7, 7, 7]  # a repeating tail proposes whole periods
    assert p.propose([1, 2, 1, 2], 5) == [1, 2, 1, 2, 1]
    assert NgramProposer(2, 3).propose([4, 1, 4, 2], 2) == []  # a one-token match is below min
    assert NgramProposer(1, 3, stop=frozenset({9})).propose([1, 2, 9, 9, 3, 1], 3) == [2]  # 9: an image's rows


def test_truncate_releases_exactly_the_tail_blocks():
    bm = BlockManager(8, BS, "engine")
    assert bm.allocate("a", [], 5)  # blocks 0, 1
    assert bm.append_slots("a", 13)  # 5 + 8 proposals' slots: blocks 2, 3
    assert bm.block_table("a") == [0, 1, 2, 3]
    bm.truncate("a", 9)
    assert bm.block_table("a") == [0, 1, 2] and bm.num_free_blocks == 5
    bm.commit("a", list(range(9)), 9)  # two full blocks enter the prefix cache, not the third
    assert bm.lookup_prefix(list(range(12)), None) == [0, 1]
    bm.truncate("a", 9)
    assert bm.block_table("a") == [0, 1, 2]
    bm.check_invariants()
    bm.free("a")
    assert bm.num_free_blocks == 8
    bm.check_invariants()


def _req(prompt, max_tokens=20) -> Request:
    return Request(SequenceId(RequestId.new()), list(prompt), SamplingParams(max_tokens=max_tokens), 0)


def _sched(max_num_tokens=16, num_blocks=32, k=4, max_batch_size=8):
    bm = BlockManager(num_blocks, BS, "engine")
    spec = Speculator(SpeculativeConfig(method="ngram", num_speculative_tokens=k, max_batch_size=max_batch_size))
    return Scheduler(SchedulerConfig(max_num_tokens, 8, 64), bm, speculation=Speculation(spec)), bm


def _prefill(s, r, token: int):
    s.add(r)
    out = s.schedule()
    s.update(out)
    r.output_token_ids.append(token)


def test_a_decode_row_carries_its_proposals_and_settles_to_the_kept_ones():
    s, bm = _sched()
    r = _req([1, 2, 3, 4, 5, 1])
    _prefill(s, r, 2)  # 6 computed: tokens 1 2 3 4 5 1 | 2
    out = s.schedule()
    (c,) = out.chunks
    assert c.draft == [3, 4, 5, 1] and (c.start, c.num_new_tokens) == (6, 5)
    assert c.token_ids == [2, 3, 4, 5, 1] and c.samples
    assert bm.block_table(r.seq) == [0, 1, 2]  # 11 slots
    s.update(out)
    assert r.num_computed_tokens == 7  # the proposals count once verified
    s.settle(r, [3])  # one kept: 8 tokens hold K/V, block 2 goes back
    r.output_token_ids += [3, 9]
    assert r.num_computed_tokens == 8 and bm.block_table(r.seq) == [0, 1]
    assert bm.lookup_prefix([1, 2, 3, 4, 5, 1, 2, 3, 0], None) == [0, 1]
    bm.check_invariants()


def test_proposals_fit_the_budget_max_tokens_and_share_steps_with_plain_rows():
    s, _ = _sched(max_num_tokens=8)
    a, b = _req([1, 2, 3, 1], max_tokens=3), _req([6, 7, 8, 9, 6, 7, 8, 9, 6, 7])
    _prefill(s, a, 2)  # 1 2 3 1 | 2: lookup proposes 3 (and more, but max_tokens leaves room for one)
    s.add(b)
    out = s.schedule()
    assert [(c.request, c.num_new_tokens, c.draft) for c in out.chunks] == [(a, 2, [3]), (b, 6, [])]
    assert out.num_tokens == 8  # a: max_tokens 3 leaves room for one proposal; b: a prefill chunk beside it


def test_no_proposals_above_the_batch_size_or_for_an_opted_out_request():
    s, _ = _sched(max_batch_size=1)
    a, b = _req([1, 2, 1]), _req([3, 4, 3])
    for r in (a, b):
        _prefill(s, r, 2)
    assert all(not c.draft for c in s.schedule().chunks)  # two running: above max_batch_size 1
    s2, _ = _sched()
    c = _req([1, 2, 1])
    c.options = RequestOptions(speculate=False)
    _prefill(s2, c, 2)
    assert not s2.schedule().chunks[0].draft


def test_a_sequence_below_the_acceptance_floor_pauses_then_retries():
    st = SpecState()
    for _ in range(WINDOW - 1):
        st.record(4, 0, 0.1)
        assert st.wants_draft()
    st.record(4, 1, 0.1)  # 1 of 32 over the window: below 0.1
    assert [st.wants_draft() for _ in range(RETRY_STEPS + 1)] == [False] * RETRY_STEPS + [True]
    assert st.counts.drafts == WINDOW and st.counts.accepted_per_position == [1, 0, 0, 0]
    good = SpecState()
    for _ in range(2 * WINDOW):
        good.record(4, 1, 0.1)
        assert good.wants_draft()


def _row(params, generator=None):
    return lambda kept: SampleRow(params, [0], list(kept), generator)


def test_greedy_keeps_the_agreeing_prefix_then_the_targets_token():
    logits = torch.full((4, 6), -5.0)
    for i, t in enumerate([2, 3, 0, 5]):
        logits[i, t] = 5.0  # the target's argmax at each position
    v = verify(logits, [2, 3, 4], _row(SamplingParams(temperature=0.0, logprobs=1)))
    assert (v.tokens, v.accepted) == ([2, 3, 0], 2)
    assert [lp.token_id for lp in v.logprobs] == [2, 3, 0] and all(lp.rank == 1 for lp in v.logprobs)
    v = verify(logits, [2, 3, 0], _row(SamplingParams(temperature=0.0)))
    assert (v.tokens, v.accepted) == ([2, 3, 0, 5], 3)


def test_sampled_verification_keeps_the_exact_distribution():
    """Position 0 with a proposal drawn from elsewhere: the kept token follows p exactly
    (accept x with p(x), else draw from p without x); after a kept proposal, position 1 follows its p."""
    torch.manual_seed(0)
    logits = torch.randn(2, 6) * 1.5
    params = SamplingParams(temperature=0.8, top_k=5, seed=1)
    g = torch.Generator().manual_seed(1)
    p0 = _exact(logits[0], 0.8, 5)
    p1 = _exact(logits[1], 0.8, 5)
    x = int(p0.argsort()[-2])  # the second likeliest: accepted sometimes, rejected sometimes
    first, second = torch.zeros(6), torch.zeros(6)
    n = 20000
    for _ in range(n):
        v = verify(logits, [x], _row(params, g))
        first[v.tokens[0]] += 1
        if v.accepted:
            second[v.tokens[1]] += 1
    assert 0.5 * float((first / n - p0).abs().sum()) < 0.015
    assert 0.5 * float((second / second.sum() - p1).abs().sum()) < 0.03
    assert first[int(p0.argsort()[0])] == 0  # top_k=5 of 6: the least likely never appears


def _exact(row: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    p = torch.softmax(row / temperature, 0)
    p[p.argsort()[: len(p) - top_k]] = 0.0
    return p / p.sum()


def test_cli_flags_merge_into_the_option():
    assert merged(None, None, None) is None
    c = merged(None, "ngram", 5)
    assert (c.method, c.num_speculative_tokens) == ("ngram", 5)
    base = SpeculativeConfig(method="ngram", num_speculative_tokens=2, max_batch_size=4)
    c = merged(base, "draft:/engines/small", None)
    assert (c.method, str(c.draft_engine_dir), c.num_speculative_tokens, c.max_batch_size) == (
        "draft_model",
        "/engines/small",
        2,
        4,
    )
    with pytest.raises(UserError, match="not a method"):
        merged(None, "eagle", None)
    with pytest.raises(UserError, match="needs --speculative"):
        merged(None, None, 3)


def test_a_prompts_last_token_alone_gets_proposals_unless_the_request_must_fork_first():
    for n, want in ((1, [2, 3]), (3, [])):
        s, _ = _sched(max_num_tokens=8, k=2)
        r = Request(SequenceId(RequestId.new()), [1, 2, 3, 4, 1, 2, 3, 4, 1], SamplingParams(max_tokens=9, n=n), 0)
        s.add(r)
        s.update(s.schedule())  # a chunk of 8: the prompt's last token is left
        (c,) = s.schedule().chunks
        assert (c.start, c.draft, c.samples) == (8, want, True)
