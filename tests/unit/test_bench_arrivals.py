"""Arrival gaps: Poisson at burstiness 1, gamma otherwise; mean 1/rate, variance 1/(rate^2 * burstiness)."""

from __future__ import annotations

import numpy as np
import pytest

from trtserve.bench.arrivals import arrival_offsets, inter_arrival_gaps

N = 200_000


@pytest.mark.parametrize("rate", [0.5, 4.0, 50.0])
@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gap_mean_and_variance(rate, burstiness):
    gaps = inter_arrival_gaps(N, rate, burstiness, seed=11)
    # Relative standard error of the mean is sqrt(1/(b N)), at most 0.45% here; allow 2%.
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.02)
    # Gamma(k) variance estimates have relative s.e. ~ sqrt((2 + 6/k) / N) <= 1.1% for k >= 0.25; allow 6%.
    assert gaps.var() == pytest.approx(1 / (rate**2 * burstiness), rel=0.06)


def test_poisson_gaps_are_exponential():
    gaps = inter_arrival_gaps(N, 2.0, 1.0, seed=5)
    # Exponential: P(gap > t) = exp(-rate t); coefficient of variation 1.
    for t in (0.1, 0.5, 1.0, 2.0):
        assert (gaps > t).mean() == pytest.approx(np.exp(-2.0 * t), abs=0.005)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)


def test_burstier_means_more_variable():
    cv = [np.std(g) / np.mean(g) for g in (inter_arrival_gaps(N, 1.0, b, seed=1) for b in (0.5, 1.0, 2.0))]
    assert cv[0] > cv[1] > cv[2]


def test_seeded():
    assert np.array_equal(inter_arrival_gaps(100, 3.0, 0.7, 9), inter_arrival_gaps(100, 3.0, 0.7, 9))
    assert not np.array_equal(inter_arrival_gaps(100, 3.0, 0.7, 9), inter_arrival_gaps(100, 3.0, 0.7, 10))


def test_inf_rate_sends_everything_at_once_and_inf_burstiness_is_uniform():
    assert not arrival_offsets(10, float("inf")).any()
    assert np.allclose(inter_arrival_gaps(5, 4.0, float("inf")), 0.25)


def test_offsets_are_rescaled_to_end_at_n_over_rate():
    off = arrival_offsets(64, 8.0, 0.5, seed=2)
    assert np.all(np.diff(off) >= 0) and off[0] > 0
    assert off[-1] == pytest.approx(64 / 8.0)


@pytest.mark.parametrize(("rate", "b"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0), (float("nan"), 1.0)])
def test_bad_parameters(rate, b):
    with pytest.raises(ValueError):
        inter_arrival_gaps(3, rate, b)
