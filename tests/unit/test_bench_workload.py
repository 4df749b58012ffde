"""Workload generators: deterministic by seed, exact lengths, in range."""

from __future__ import annotations

import numpy as np
import pytest

from trtserve.bench import workload as w


def test_random_fixed_and_ranged_lengths():
    fixed = w.random_requests(20, 16, 8, vocab_size=320, seed=1)
    assert all(r.prompt_len == len(r.prompt) == 16 and r.output_len == 8 for r in fixed)
    ranged = w.random_requests(500, (32, 512), (16, 256), vocab_size=320, seed=1)
    ins, outs = [r.prompt_len for r in ranged], [r.output_len for r in ranged]
    assert all(r.prompt_len == len(r.prompt) for r in ranged)
    assert min(ins) >= 32 and max(ins) <= 512 and min(outs) >= 16 and max(outs) <= 256
    assert min(ins) < 60 and max(ins) > 480  # the range is covered, inclusive ends allowed
    assert all(10 <= t < 320 for r in ranged for t in r.prompt)


def test_seeded():
    a, b = w.random_requests(10, (4, 40), (1, 9), 1000, seed=7), w.random_requests(10, (4, 40), (1, 9), 1000, seed=7)
    assert a == b
    assert a != w.random_requests(10, (4, 40), (1, 9), 1000, seed=8)
    assert w.sharegpt_like(30, 5000, seed=3) == w.sharegpt_like(30, 5000, seed=3)
    assert w.shared_prefix(2, 3, 20, 5, 4, 500, seed=3) == w.shared_prefix(2, 3, 20, 5, 4, 500, seed=3)


@pytest.mark.parametrize(("inp", "out"), [(0, 4), ((5, 2), 4), (4, (0, 3))])
def test_bad_lengths(inp, out):
    with pytest.raises(ValueError):
        w.random_requests(3, inp, out, 100)


def test_sharegpt_like_distribution():
    reqs = w.sharegpt_like(20_000, 32000, seed=0)
    ins = np.array([r.prompt_len for r in reqs])
    outs = np.array([r.output_len for r in reqs])
    assert all(r.prompt_len == len(r.prompt) for r in reqs[:100])
    assert ins.min() >= 4 and ins.max() <= 1024 and outs.min() >= 4 and (ins + outs).max() <= 2048
    # Log-normal: the median is exp(mu) = mean * exp(-sigma^2 / 2); clipping barely moves it.
    assert np.median(ins) == pytest.approx(w.SHAREGPT_INPUT_MEAN * np.exp(-(w.SHAREGPT_INPUT_SIGMA**2) / 2), rel=0.05)
    assert np.median(outs) == pytest.approx(
        w.SHAREGPT_OUTPUT_MEAN * np.exp(-(w.SHAREGPT_OUTPUT_SIGMA**2) / 2), rel=0.05
    )
    assert ins.mean() == pytest.approx(w.SHAREGPT_INPUT_MEAN, rel=0.1)  # clipped tails lower it a little
    assert outs.mean() == pytest.approx(w.SHAREGPT_OUTPUT_MEAN, rel=0.1)


def test_shared_prefix_structure():
    reqs = w.shared_prefix(3, 4, 40, (2, 6), 5, vocab_size=500, seed=2)
    assert len(reqs) == 12
    prefixes = {tuple(r.prompt[:40]) for r in reqs}
    assert len(prefixes) == 3
    for p in prefixes:
        assert sum(tuple(r.prompt[:40]) == p for r in reqs) == 4
    assert all(42 <= r.prompt_len == len(r.prompt) <= 46 and r.output_len == 5 for r in reqs)
    # Shuffled: the requests of one prefix are not all adjacent.
    order = [tuple(r.prompt[:40]) for r in reqs]
    assert any(order[i] != order[i + 1] for i in range(3))
