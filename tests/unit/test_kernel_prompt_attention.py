"""The prompt attention kernel (trtserve/kernels/prompt_attention.c) against torch's SDPA and HF's eager
attention on the same keys and values gathered out of a paged cache: whole prompts and chunks after
cached keys, GQA, scattered blocks, windows, soft-caps and sinks, each dtype; and the layer routing
prompt rows to it with the torch path's result."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from trtserve.kernels import attention

needs_kernel = pytest.mark.skipif(
    attention.load_prompt() is None, reason="the attention kernel needs x86-64 with AVX2/FMA/F16C and a C compiler"
)
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _paged(g, lens, bs, n_kv, hd, dtype, n_blocks=None):
    """Keys and values of a cache of scattered blocks, and each sequence's block table."""
    width = max(-(-n // bs) for n in lens)
    n_blocks = n_blocks or width * len(lens) + 3
    keys = torch.randn(n_blocks * bs, n_kv, hd, generator=g).to(dtype)
    values = torch.randn(n_blocks * bs, n_kv, hd, generator=g).to(dtype)
    perm = torch.randperm(n_blocks, generator=g)
    tables = torch.stack([perm[i * width : (i + 1) * width] for i in range(len(lens))])  # no block shared
    return keys, values, tables


def _gathered(t, table, first, n, bs):
    pos = torch.arange(first, n)
    return t[table[pos // bs] * bs + pos % bs].transpose(0, 1)  # (n_kv, keys, hd)


@needs_kernel
@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize(("n_kv", "group", "hd", "bs"), [(3, 3, 64, 16), (1, 4, 128, 32), (2, 1, 16, 4)])
def test_prompts_and_chunks_match_sdpa(dtype, n_kv, group, hd, bs):
    """Whole prompts (no cached keys) and chunks after cached keys in one call: each row attends causally to its
    sequence's keys up to its position; tiles of 64 keys cut across the diagonal and across blocks."""
    g = torch.Generator().manual_seed(n_kv * 100 + group * 10 + hd)
    seqs = [(1, 1), (37, 37), (150, 150), (200, 17), (300, 130), (70, 2)]  # (keys after the step, new rows)
    lens = [k for k, _ in seqs]
    keys, values, tables = _paged(g, lens, bs, n_kv, hd, dtype)
    q_lens = [n for _, n in seqs]
    pad = 5  # rows of other sequences (decode rows, say) before each: out of the kernel's reach
    q_start = [sum(q_lens[:i]) + pad * (i + 1) for i in range(len(seqs))]
    n_rows = q_start[-1] + q_lens[-1] + pad
    q = torch.randn(n_rows, n_kv * group, hd, generator=g).to(dtype)
    out = torch.full((n_rows, n_kv * group * hd), float("nan"), dtype=dtype)
    scale = hd**-0.5
    T = torch.tensor
    assert attention.prompt_attention(q, keys, values, tables, T(lens), T(q_start), T(q_lens), bs, scale, out)
    written = torch.zeros(n_rows, dtype=torch.bool)
    for i, (n, m) in enumerate(seqs):
        k, v = (_gathered(t, tables[i], 0, n, bs).float().repeat_interleave(group, 0) for t in (keys, values))
        rows = q[q_start[i] : q_start[i] + m].float().transpose(0, 1)  # (heads, m, hd)
        mask = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
        ref = F.scaled_dot_product_attention(rows, k, v, attn_mask=mask, scale=scale)  # (heads, m, hd)
        got = out[q_start[i] : q_start[i] + m].view(m, n_kv * group, hd).transpose(0, 1)
        torch.testing.assert_close(got.float(), ref, rtol=TOL[dtype], atol=TOL[dtype])
        written[q_start[i] : q_start[i] + m] = True
    assert out[~written].isnan().all()  # only the sequences' rows are written


@needs_kernel
@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.bfloat16])
def test_float32_rows_over_a_16_bit_cache_match_sdpa_on_the_widened_keys(kv_dtype):
    g = torch.Generator().manual_seed(7)
    n_kv, group, hd, bs, lens, q_lens = 2, 2, 64, 8, [90, 40], [60, 40]
    keys, values, tables = _paged(g, lens, bs, n_kv, hd, kv_dtype)
    q = torch.randn(sum(q_lens), n_kv * group, hd, generator=g)
    out = torch.zeros(sum(q_lens), n_kv * group * hd)
    T = torch.tensor
    assert attention.prompt_attention(q, keys, values, tables, T(lens), T([0, 60]), T(q_lens), bs, 0.1, out)
    for i, (n, m, s) in enumerate(zip(lens, q_lens, [0, 60], strict=True)):
        k, v = (_gathered(t, tables[i], 0, n, bs).float().repeat_interleave(group, 0) for t in (keys, values))
        mask = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
        ref = F.scaled_dot_product_attention(q[s : s + m].transpose(0, 1), k, v, attn_mask=mask, scale=0.1)
        torch.testing.assert_close(out[s : s + m].view(m, -1, hd).transpose(0, 1), ref, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_windows_softcaps_and_sinks_match_hfs_eager_attention(dtype):
    """Gemma 2's soft-capped scores and gpt-oss's sinks, each row over the last `window` keys up to it, as
    paged_attention.eager computes them (HF's eager attention) on a mask, in float64 (eager's bf16 softmax
    is itself ~0.05 off the exact weights here; the kernel's float32 softmax ~0.008)."""
    from trtserve.models.paged_attention import eager

    g = torch.Generator().manual_seed(11)
    n_kv, group, hd, bs, window, cap = 2, 2, 16, 4, 70, 3.0
    lens, q_lens = [150, 90], [80, 90]  # a chunk whose first rows' windows start past key 0; a whole prompt
    keys, values, tables = _paged(g, lens, bs, n_kv, hd, dtype)
    q = (torch.randn(sum(q_lens), n_kv * group, hd, generator=g) * 3).to(dtype)
    sinks = torch.randn(n_kv * group, generator=g).to(dtype)
    T = torch.tensor
    for softcap, sink in ((cap, None), (None, sinks), (None, None)):
        out = torch.zeros(sum(q_lens), n_kv * group * hd, dtype=dtype)
        s32 = None if sink is None else sink.float()
        assert attention.prompt_attention(
            q, keys, values, tables, T(lens), T([0, 80]), T(q_lens), bs, 0.5, out, window, softcap, s32
        )
        for i, (n, m, s) in enumerate(zip(lens, q_lens, [0, 80], strict=True)):
            k, v = (_gathered(t, tables[i], 0, n, bs)[None].double() for t in (keys, values))  # (1, n_kv, keys, hd)
            qg = q[s : s + m].double().view(m, n_kv, group, hd).permute(1, 2, 0, 3).reshape(1, n_kv, group * m, hd)
            pos, kp = n - m + torch.arange(m), torch.arange(n)
            mask = ((kp[None, :] <= pos[:, None]) & (pos[:, None] - kp[None, :] < window)).repeat(group, 1)[None, None]
            sk = (
                None
                if sink is None
                else sink.double().view(1, n_kv, group, 1).expand(1, n_kv, group, m).reshape(1, n_kv, -1, 1)
            )
            ref = eager(qg, k, v, mask, 0.5, softcap, sk)  # (1, n_kv, group * m, hd), rows by (group, m)
            ref = ref.view(n_kv, group, m, hd).permute(2, 0, 1, 3).reshape(m, -1)
            torch.testing.assert_close(out[s : s + m].float(), ref.float(), rtol=TOL[dtype], atol=TOL[dtype])


@needs_kernel
def test_bad_lengths_and_head_sizes_are_refused_not_read_past_the_table():
    keys = torch.randn(16, 1, 16)
    q, out = torch.randn(4, 1, 16), torch.zeros(4, 16)
    tables, start = torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    T = torch.tensor
    for n, m in ((17, 4), (3, 4), (4, 0)):  # past two blocks of 8; fewer keys than rows; no rows
        assert not attention.prompt_attention(q, keys, keys, tables, T([n]), start, T([m]), 8, 1.0, out)
    assert not out.any()
    odd = torch.randn(16, 1, 12)  # a head size no vector width divides
    assert not attention.prompt_attention(torch.randn(4, 1, 12), odd, odd, tables, T([4]), start, T([4]), 8, 1.0, out)


@needs_kernel
def test_the_layer_runs_prompt_rows_on_the_kernel_with_the_torch_paths_values(monkeypatch):
    """A step of a whole prompt, a chunk after cached keys and a decode row: the layer hands the prompt groups to
    the kernel, and its output is the torch path's (gather, mask, SDPA)."""
    from trtserve.models.batch import SeqChunk, make_batch
    from trtserve.models.kv_cache import PagedKVCache
    from trtserve.models.paged_attention import LayerAttention

    g = torch.Generator().manual_seed(5)
    n_h, n_kv, hd, bs = 6, 2, 64, 16
    shape = SimpleNamespace(num_hidden_layers=1, num_key_value_heads=n_kv, head_size=hd)
    kv = PagedKVCache(shape, 40, bs, torch.float32, torch.device("cpu"))
    kv.data.copy_(torch.randn(kv.data.shape, generator=g))
    seqs = [SeqChunk([1] * 70, 0, list(range(5))), SeqChunk([2] * 40, 100, list(range(5, 14))),
            SeqChunk([3], 33, [20, 21, 22])]  # fmt: skip
    batch = make_batch(seqs, bs, gqa_group=n_h // n_kv)
    q = torch.randn(111, n_h, hd, generator=g)
    layer = LayerAttention(n_h, n_kv, hd, hd**-0.5, None, None, False)
    calls = []
    real = attention.prompt_attention
    monkeypatch.setattr(attention, "prompt_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = layer(0, q, batch, kv)
    assert calls  # the prompt rows went to the kernel
    monkeypatch.setattr(attention, "prompt_attention", lambda *a, **k: False)
    ref = layer(0, q, make_batch(seqs, bs, gqa_group=n_h // n_kv), kv)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
