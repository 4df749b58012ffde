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
@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("n_kv", "group", "hd"), [(3, 3, 64), (2, 1, 8)])  # 16-lane and 8-lane paths
def test_float32_queries_over_a_16_bit_cache_match_sdpa_on_the_widened_keys(kv_dtype, n_kv, group, hd):
    """A float32 model's 16-bit cache (the kv_cache_dtype option): the kernel reads the keys and values widened,
    and its weights and output stay float32, as torch's path computes after widening the gathered blocks."""
    g = torch.Generator().manual_seed(hd + n_kv)
    bs, n_blocks, lens = 8, 30, [1, 9, 40, 77]
    keys = torch.randn(n_blocks * bs, n_kv, hd, generator=g).to(kv_dtype)
    values = torch.randn(n_blocks * bs, n_kv, hd, generator=g).to(kv_dtype)
    tables = torch.stack([torch.randperm(n_blocks, generator=g)[:10] for _ in lens])
    rows = torch.arange(len(lens))
    q = torch.randn(len(lens), n_kv * group, hd, generator=g)
    out = torch.full((len(lens), n_kv * group * hd), float("nan"))
    assert attention.usable(q, keys)
    assert attention.decode_attention(q, keys, values, tables, torch.tensor(lens), rows, bs, hd**-0.5, out)
    for i, n in enumerate(lens):
        pos = torch.arange(n)
        slots = tables[i, pos // bs] * bs + pos % bs
        k = keys[slots].float().transpose(0, 1).repeat_interleave(group, 0)
        v = values[slots].float().transpose(0, 1).repeat_interleave(group, 0)
        ref = F.scaled_dot_product_attention(q[i][:, None], k, v, scale=hd**-0.5)
        torch.testing.assert_close(out[i], ref.flatten(), rtol=1e-5, atol=1e-5)  # float32's tolerance
    # a float16 cache under bfloat16 queries is no pair the kernel takes: torch's path runs instead
    assert not attention.usable(q.to(torch.bfloat16), keys.to(torch.float16))


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


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hd", [16, 8])  # the AVX-512 build's 16-lane path, and the 8-lane one
def test_windows_softcaps_and_sinks_match_hfs_eager_attention(dtype, hd):
    """Gemma 2's soft-capped scores and gpt-oss's sinks over a window's keys (the last `window`), as
    paged_attention.eager computes them (HF's eager attention)."""
    from trtserve.models.paged_attention import eager

    g = torch.Generator().manual_seed(hd)
    n_kv, group, bs, window, cap = 2, 2, 4, 5, 3.0
    lens = [1, 5, 6, 23]  # inside the window, at it, past it
    keys = torch.randn(32 * bs, n_kv, hd, generator=g).to(dtype)
    values = torch.randn(32 * bs, n_kv, hd, generator=g).to(dtype)
    tables = torch.stack([torch.randperm(32, generator=g)[:6] for _ in lens])
    q = (torch.randn(len(lens), n_kv * group, hd, generator=g) * 3).to(dtype)
    sinks = torch.randn(n_kv * group, generator=g).to(dtype)
    rows = torch.arange(len(lens))
    for softcap, sink in ((cap, None), (None, sinks)):
        out = torch.zeros(len(lens), n_kv * group * hd, dtype=dtype)
        s32 = None if sink is None else sink.float()
        ok = attention.decode_attention(
            q, keys, values, tables, torch.tensor(lens), rows, bs, 0.5, out, window, softcap, s32
        )
        assert ok
        for i, n in enumerate(lens):
            pos = torch.arange(max(0, n - window), n)
            slots = tables[i, pos // bs] * bs + pos % bs
            k, v = (t[slots].transpose(0, 1)[None] for t in (keys, values))  # (1, n_kv, keys, hd)
            qg = q[i].view(1, n_kv, group, hd)
            mask = torch.ones(1, 1, group, len(pos), dtype=torch.bool)
            s = None if sink is None else sink.view(1, n_kv, group, 1)
            ref = eager(qg, k, v, mask, 0.5, softcap, s).flatten()
            torch.testing.assert_close(out[i].float(), ref.float(), rtol=TOL[dtype], atol=TOL[dtype])
