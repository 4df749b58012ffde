"""`trtserve eval`'s windowing and metrics, on plain ints and fixed logits (no model)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trtserve.runtime.evaluate import Window, _score_window, _Totals, windows


def test_windows_hf_layout():
    # seq_len 4, stride 2 over 9 tokens: each window scores what the previous one did not.
    assert windows(9, 4, 2) == [Window(0, 4, 1), Window(2, 6, 4), Window(4, 8, 6), Window(6, 9, 8)]
    # No overlap: a window's first token has no context, so tokens 4 and 8 are not scored.
    assert windows(9, 4, 4) == [Window(0, 4, 1), Window(4, 8, 5)]
    assert windows(3, 8, 4) == [Window(0, 3, 1)]
    assert list(Window(2, 6, 4).rows) == [1, 2]  # the logits after tokens 3 and 4 predict tokens 4 and 5


@given(n=st.integers(2, 300), seq_len=st.integers(2, 64), data=st.data())
def test_each_token_is_scored_at_most_once_with_context(n, seq_len, data):
    stride = data.draw(st.integers(1, seq_len))
    scored = []
    for w in windows(n, seq_len, stride):
        assert 0 <= w.begin < w.first < w.end <= n and w.end - w.begin <= seq_len
        assert w.first - w.begin >= min(seq_len - stride, w.begin) or w.begin == 0  # context kept
        scored += range(w.first, w.end)
        assert [w.begin + r + 1 for r in w.rows] == list(range(w.first, w.end))  # row r predicts token r + 1
    if stride < seq_len:
        assert scored == list(range(1, n))
    else:  # disjoint windows: all but each window's first token
        assert scored == [i for i in range(1, n) if i % seq_len]


class _Fixed:
    """A scorer whose logits at window offset r are a fixed random function of the token at r."""

    def __init__(self, table: torch.Tensor):
        self.table = table  # (vocab, vocab)

    def logits(self, tokens, rows):
        return self.table[torch.tensor(tokens)[list(rows)]]


def test_metrics_against_numpy():
    g = torch.Generator().manual_seed(0)
    vocab = 11
    ref = torch.randn(vocab, vocab, generator=g) * 3
    eng = ref + torch.randn(vocab, vocab, generator=g)  # close: agreeing at most positions, not all
    ids = torch.randint(0, vocab, (40,), generator=g).tolist()
    t = _Totals()
    for w in windows(len(ids), 8, 3):
        _score_window(ids, w, _Fixed(eng), _Fixed(ref), t)

    def logp(table):
        x = table.double().numpy()
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    # Position i (predicting ids[i + 1]) sees only ids[i] in _Fixed, so windows do not matter.
    lq, lp = logp(eng)[ids[:-1]], logp(ref)[ids[:-1]]  # (39, vocab)
    nxt = np.array(ids[1:])
    kl = (np.exp(lp) * (lp - lq)).sum(-1)  # KL(ref || engine) per position
    assert t.count == 39
    assert t.nll == pytest.approx(-lq[np.arange(39), nxt].sum(), rel=1e-12)
    assert t.ref_nll == pytest.approx(-lp[np.arange(39), nxt].sum(), rel=1e-12)
    assert t.kl == pytest.approx(kl.sum(), rel=1e-12)
    assert t.max_kl == pytest.approx(kl.max(), rel=1e-12)
    assert t.agree == int((lq.argmax(-1) == lp.argmax(-1)).sum())
    assert 0 < t.agree < 39 and not math.isclose(t.kl, 0)
