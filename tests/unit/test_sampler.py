"""Sampler math against HF transformers' logits processors."""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.sampler import SampleRow, apply_min_tokens, apply_penalties, sample


def _logits(seed=0, vocab=50):
    return torch.randn(1, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def test_repetition_penalty_equals_hf():
    logits = _logits()
    prompt, output = [1, 2, 3, 3], [7, 2]
    p = SamplingParams(repetition_penalty=1.3)
    ours = logits.clone()
    apply_penalties(ours, [SampleRow(p, prompt, output, None)])
    ref = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([prompt + output]), logits.clone())
    assert torch.allclose(ours, ref)


def test_presence_and_frequency_penalties_follow_openai():
    logits = _logits()
    p = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    ours = logits.clone()
    apply_penalties(ours, [SampleRow(p, [9, 9], [4, 4, 4, 5], None)])
    expected = logits.clone()
    expected[0, 4] -= 3 * 0.25 + 0.5
    expected[0, 5] -= 1 * 0.25 + 0.5
    assert torch.allclose(ours, expected)  # prompt tokens (9) untouched


def test_min_tokens_masks_eos_and_stop_ids():
    logits = _logits()
    p = SamplingParams(min_tokens=3, max_tokens=5)
    ours = logits.clone()
    apply_min_tokens(ours, [SampleRow(p, [1], [0, 0], None, banned_until_min=[2, 11])])
    assert ours[0, 2] == float("-inf") and ours[0, 11] == float("-inf")
    ours = logits.clone()
    apply_min_tokens(ours, [SampleRow(p, [1], [0, 0, 0], None, banned_until_min=[2, 11])])
    assert torch.equal(ours, logits)


def _support(params: SamplingParams, logits: torch.Tensor, draws=400) -> set[int]:
    g = torch.Generator().manual_seed(0)
    rows = [SampleRow(params, [], [], g)]
    return {sample(logits, rows)[0][0] for _ in range(draws)}


def test_top_k_top_p_min_p_keep_what_hf_keeps():
    logits = _logits(seed=3, vocab=30)
    cases = [
        (SamplingParams(temperature=0.7, top_k=5), [TemperatureLogitsWarper(0.7), TopKLogitsWarper(5)]),
        (SamplingParams(temperature=1.0, top_p=0.8), [TopPLogitsWarper(0.8)]),
        (SamplingParams(temperature=1.0, min_p=0.2), [MinPLogitsWarper(0.2)]),
    ]
    for params, warpers in cases:
        ref = logits.clone()
        for w in warpers:
            ref = w(torch.tensor([[0]]), ref)
        allowed = set(torch.nonzero(ref[0] > float("-inf")).flatten().tolist())
        got = _support(params, logits)
        assert got <= allowed, (params, got - allowed)
        assert len(got) >= min(len(allowed), 2)


def test_greedy_rows_and_logprobs():
    logits = torch.cat([_logits(1), _logits(2)])
    tokens, lps = sample(
        logits,
        [
            SampleRow(SamplingParams(temperature=0.0, logprobs=2), [], [], None),
            SampleRow(SamplingParams(temperature=0.0), [], [], None),
        ],
    )
    assert tokens == logits.argmax(-1).tolist()
    ref = torch.log_softmax(logits[0], -1)
    assert lps[1] is None and lps[0].token_id == tokens[0] and lps[0].rank == 1
    assert abs(lps[0].logprob - float(ref[tokens[0]])) < 1e-6
    assert [t for t, _ in lps[0].top] == ref.topk(2).indices.tolist()


def test_seeded_draws_do_not_depend_on_the_other_rows():
    logits = _logits(seed=5, vocab=100)
    p = SamplingParams(temperature=1.0, seed=3)

    def draw(with_others: bool):
        g = torch.Generator().manual_seed(3)
        rows = [SampleRow(p, [], [], g)]
        batch = logits
        if with_others:
            other = SampleRow(SamplingParams(temperature=1.0), [], [], torch.Generator().manual_seed(8))
            rows = [other] + rows + [other]
            batch = torch.cat([_logits(9, 100), logits, _logits(10, 100)])
        return [sample(batch, rows)[0][1 if with_others else 0] for _ in range(10)]

    assert draw(False) == draw(True)


def test_a_vanishing_temperature_samples_the_top_token():
    """temperature 2.7e-118 (a fuzzed request): logits / t overflowed to inf and softmax to NaN."""
    logits = _logits(seed=3)
    for t in (2.7e-118, 1e-30, 1e-7):
        p = SamplingParams(temperature=t, seed=1)
        tokens, _ = sample(logits, [SampleRow(p, [1], [], torch.Generator().manual_seed(1))])
        assert tokens == [int(logits.argmax())]


def test_a_vanishing_repetition_penalty_keeps_the_distribution_finite():
    """repetition_penalty 5e-324 (fuzzed requests): seen tokens' logits overflowed to inf, softmax to NaN."""
    logits = _logits(seed=4)
    seen = [int(logits.argmin()), 7]
    for penalty in (5e-324, 5.3e-79):
        p = SamplingParams(repetition_penalty=penalty, temperature=0.5, seed=2, logprobs=2)
        tokens, lps = sample(logits, [SampleRow(p, seen, [], torch.Generator().manual_seed(2))])
        assert tokens[0] in seen and lps[0].logprob == lps[0].logprob  # a seen token, a finite logprob


def test_greedy_takes_the_first_of_tied_maxima_and_never_writes_the_logits():
    """As torch's argmax and HF's greedy search: the lowest id among equal maxima. The caller's logits stay as
    they were, whether a row's penalties need a copy or no row has any."""
    logits = torch.tensor([[0.0, 3.0, 1.0, 3.0], [5.0, 5.0, -1.0, 5.0]])
    before = logits.clone()
    plain = SampleRow(SamplingParams(max_tokens=4, temperature=0.0), [2], [], None)
    assert sample(logits, [plain, plain])[0] == [1, 0]
    assert torch.equal(logits, before)
    penalized = SampleRow(SamplingParams(max_tokens=4, temperature=0.0, repetition_penalty=2.0), [0], [], None)
    assert sample(logits, [plain, penalized])[0] == [1, 1]  # token 0's 5.0 halved: the next of the tie wins
    assert torch.equal(logits, before)
