"""The decode attention kernel (trtserve/kernels/decode_attention.c) against torch's SDPA on the
same keys and values gathered out of a paged cache: GQA, partial last blocks, scattered blocks and
output rows, each dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trtserve.kernels import attention

needs_kernel = pytest.mark.skipif(
    attention.load() is None, reason="the attention kernel needs x86-64 with AVX2/FMA/F16C and a C compiler"
)
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@needs_kernel
@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize(("n_kv", "group", "hd", "bs"), [(3, 3, 64, 16), (1, 4, 32, 32), (2, 1, 8, 4)])
@pytest.mark.parametrize("n_seqs", [5, 12])  # tasks of one query head, of a KV head's group, of whole sequences
def test_decode_attention_matches_sdpa(dtype, n_kv, group, hd, bs, n_seqs):
    g = torch.Generator().manual_seed(n_kv * 100 + group * 10 + hd + n_seqs)
    n_blocks, lens = 40, ([1, 7, bs, 3 * bs + 5, 61] * 3)[:n_seqs]
    keys = torch.randn(n_blocks * bs, n_kv, hd, generator=g).to(dtype)  # (slots, n_kv, hd)
    values = torch.randn(n_blocks * bs, n_kv, hd, generator=g).to(dtype)
    width = max(-(-n // bs) for n in lens)
    tables = torch.stack([torch.randperm(n_blocks, generator=g)[:width] for _ in lens])  # scattered blocks
    n_rows = n_seqs + 3
    rows = torch.randperm(n_rows, generator=g)[:n_seqs]  # each sequence's token in the flat batch, out of order
    q = torch.randn(n_rows, n_kv * group, hd, generator=g).to(dtype)
    out = torch.full((n_rows, n_kv * group * hd), float("nan"), dtype=dtype)
    scale = hd**-0.5
    ok = attention.decode_attention(q, keys, values, tables, torch.tensor(lens), rows, bs, scale, out)
    assert ok
    for i, n in enumerate(lens):
        pos = torch.arange(n)
        slots = tables[i, pos // bs] * bs + pos % bs
        k = keys[slots].float().transpose(0, 1).repeat_interleave(group, 0)  # (heads, n, hd)
        v = values[slots].float().transpose(0, 1).repeat_interleave(group, 0)
        ref = F.scaled_dot_product_attention(q[rows[i]].float()[:, None], k, v, scale=scale)  # (heads, 1, hd)
        torch.testing.assert_close(out[rows[i]].float(), ref.flatten(), rtol=TOL[dtype], atol=TOL[dtype])
    untouched = [r for r in range(n_rows) if r not in rows.tolist()]
    assert out[untouched].isnan().all()  # only the sequences' rows are written


@needs_kernel
def test_bad_lengths_are_refused_not_read_past_the_table():
    keys = torch.randn(16, 1, 8)
    q, out = torch.randn(1, 1, 8), torch.zeros(1, 8)
    tables, rows = torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    for n in (0, 17):  # no keys; more keys than two blocks of 8 hold
        assert not attention.decode_attention(q, keys, keys, tables, torch.tensor([n]), rows, 8, 1.0, out)


@needs_kernel
def test_scores_far_below_the_max_weigh_nothing():
    """Score gaps of hundreds (exp underflows to 0 in the kernel's vector exp, as in expf) give SDPA's
    answer, with no NaN or inf: here the one key that matches the query takes all the weight."""
    g = torch.Generator().manual_seed(3)
    hd, n = 16, 21  # 21 keys: two full lanes of 8 and a tail of 5
    keys = torch.randn(n, 1, hd, generator=g)
    q = (keys[13] * 40.0)[None]  # (1 head, hd): scores spread over hundreds
    out = torch.zeros(1, hd)
    tables, rows = torch.arange(3)[None], torch.zeros(1, dtype=torch.long)
    padded = torch.cat([keys, torch.zeros(3 * 8 - n, 1, hd)])  # 3 blocks of 8 slots
    assert attention.decode_attention(q, padded, padded, tables, torch.tensor([n]), rows, 8, 1.0, out)
    ref = F.scaled_dot_product_attention(q[:, None], keys.transpose(0, 1), keys.transpose(0, 1), scale=1.0)
    assert out.isfinite().all()
    torch.testing.assert_close(out, ref.flatten(1), rtol=1e-5, atol=1e-5)
