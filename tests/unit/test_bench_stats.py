"""summarize(): vLLM's definitions (TPOT excludes the first token, ITL pooled, goodput) on hand-built timings."""

from __future__ import annotations

import numpy as np
import pytest

from trtserve.bench.client import BenchRun, RequestResult
from trtserve.bench.stats import summarize


def _run(results, duration=2.0):
    return BenchRun("openai", "m", "http://x", results, duration, float("inf"), 1.0, None)


def _req(ttft, latency, tokens, itl, prompt=10):
    return RequestResult(prompt, tokens, True, tokens, ttft, list(itl), latency)


@pytest.fixture
def run():
    return _run(
        [
            _req(0.1, 1.0, 10, [0.1] * 9, prompt=100),  # TPOT = (1.0 - 0.1) / 9 = 100 ms
            _req(0.2, 0.2, 1, [], prompt=50),  # one token: no TPOT sample, TPOT 0 for goodput
            _req(0.3, 0.9, 4, [0.1, 0.2, 0.3], prompt=20),  # TPOT = 0.6 / 3 = 200 ms
            RequestResult(7, 5, False, error="HTTP 500: boom"),
        ]
    )


def test_counts_and_throughputs(run):
    s = summarize(run)
    assert (s["completed"], s["failed"]) == (3, 1)
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (170, 15)  # failed requests count nothing
    assert s["request_throughput"] == pytest.approx(3 / 2.0)
    assert s["output_throughput"] == pytest.approx(15 / 2.0)
    assert s["total_token_throughput"] == pytest.approx(185 / 2.0)
    assert s["request_goodput"] is None
    assert s["output_lens"] == [10, 1, 4, 0] and s["errors"][3] == "HTTP 500: boom"


def test_tpot_excludes_first_token_and_one_token_requests(run):
    s = summarize(run)
    assert s["mean_tpot_ms"] == pytest.approx(150.0)  # mean of 100 and 200; the 1-token request is left out
    assert s["median_tpot_ms"] == pytest.approx(150.0)
    assert s["p90_tpot_ms"] == pytest.approx(190.0)  # linear interpolation: 100 + 0.9 * 100


def test_itl_is_pooled_over_requests(run):
    s = summarize(run)
    itls = np.array([0.1] * 9 + [0.1, 0.2, 0.3]) * 1000
    assert s["mean_itl_ms"] == pytest.approx(itls.mean())
    assert s["median_itl_ms"] == pytest.approx(100.0)
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(itls, 99))
    assert s["std_itl_ms"] == pytest.approx(itls.std())


def test_percentiles_match_numpy_on_known_data():
    rng = np.random.default_rng(3)
    ttfts = rng.exponential(0.2, size=101)
    lat = ttfts + rng.uniform(0.5, 2.0, size=101)
    s = summarize(_run([_req(t, e, 8, [0.01] * 7) for t, e in zip(ttfts, lat, strict=True)]))
    for key, values in (("ttft", ttfts), ("e2el", lat)):
        ms = values * 1000
        assert s[f"mean_{key}_ms"] == pytest.approx(ms.mean())
        assert s[f"median_{key}_ms"] == pytest.approx(np.median(ms))
        assert s[f"p90_{key}_ms"] == pytest.approx(np.percentile(ms, 90))
        assert s[f"p99_{key}_ms"] == pytest.approx(np.percentile(ms, 99))
    # 101 sorted values: the median is the 51st, p90 the 91st exactly.
    assert s["median_ttft_ms"] == pytest.approx(np.sort(ttfts)[50] * 1000)
    assert s["p90_ttft_ms"] == pytest.approx(np.sort(ttfts)[90] * 1000)


@pytest.mark.parametrize(
    ("slo", "good"),
    [
        ({"ttft": 150}, 1),  # only the 100 ms TTFT
        ({"ttft": 300}, 3),  # 300 ms meets a 300 ms SLO (<=)
        ({"tpot": 150}, 2),  # 100 ms and the one-token request's 0
        ({"ttft": 150, "tpot": 150}, 1),  # every SLO must hold
        ({"ttft": 250, "tpot": 50}, 1),  # only the one-token request
        ({"e2el": 950}, 2),
    ],
)
def test_goodput(run, slo, good):
    s = summarize(run, slo)
    assert s["request_goodput"] == pytest.approx(good / 2.0)
    assert s["goodput_slo_ms"] == slo


def test_unknown_slo_is_rejected(run):
    with pytest.raises(ValueError, match="unknown SLO itl"):
        summarize(run, {"itl": 5})


def test_all_failed_gives_zeros_not_errors():
    s = summarize(_run([RequestResult(5, 5, False, error="x")]))
    assert s["completed"] == 0 and s["failed"] == 1
    assert s["mean_ttft_ms"] == 0 and s["p99_e2el_ms"] == 0 and s["output_throughput"] == 0
