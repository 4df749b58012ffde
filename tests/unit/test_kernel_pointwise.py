"""The decoder's fused glue kernels (trtserve/kernels/pointwise.c) against the torch ops they stand
in for (trtserve/models/decoder.py's fallbacks): bit for bit in bfloat16 and float16, where every op
rounds, and to float32 rounding otherwise."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from trtserve.kernels import pointwise
from trtserve.models.decoder import rms_norm
from trtserve.models.rope import Rope

needs_kernel = pytest.mark.skipif(
    pointwise._fn("trtserve_rms_norm") is None,
    reason="the pointwise kernels need x86-64 with AVX2/FMA/F16C and a C compiler",
)
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def check(got: torch.Tensor, want: torch.Tensor) -> None:
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)
    else:  # every intermediate rounded as torch rounds it: the same bits, up to one-ulp ties in the
        # float32 statistics, so compare exactly but allow a handful of one-ulp elements
        diff = (got.float() - want.float()).abs() > 0
        assert diff.float().mean() < 0.01, f"{int(diff.sum())} of {diff.numel()} elements differ"
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_add_rms_norm_matches_torch(dtype, rows):
    g = torch.Generator().manual_seed(rows)
    h = (torch.randn(rows, 576, generator=g) * 3).to(dtype)
    delta = torch.randn(rows, 576, generator=g).to(dtype)
    w = (1 + torch.randn(576, generator=g) / 4).to(dtype)
    want_h = h + delta
    want = rms_norm(want_h, w, 1e-5)
    got_h = h.clone()
    got = pointwise.add_rms_norm(got_h, delta, w, 1e-5)
    assert torch.equal(got_h, want_h)  # the residual add, in place, rounded as torch's
    check(got, want)
    check(pointwise.add_rms_norm(want_h.clone(), None, w, 1e-5), want)  # no residual to add


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_h", "n_kv", "hd"), [(9, 3, 64), (4, 1, 32)])
def test_rope_kv_matches_torch_and_writes_only_the_slots(dtype, n_h, n_kv, hd):
    cfg = SimpleNamespace(
        rotary_scaling=None, rotary_base=10000.0, head_size=hd, hidden_size=n_h * hd, num_attention_heads=n_h,
        max_position_embeddings=512,
    )  # fmt: skip
    rope = Rope(cfg, 512, dtype, torch.device("cpu"))
    g = torch.Generator().manual_seed(n_h)
    t = 5
    qkv = torch.randn(t, (n_h + 2 * n_kv) * hd, generator=g).to(dtype)
    positions = torch.tensor([0, 17, 3, 511, 200])
    slots = torch.tensor([40, 2, 13, 7, 63])
    keys = torch.full((64, n_kv, hd), float("nan"), dtype=dtype)
    values = keys.clone()
    q = pointwise.rope_kv(qkv, n_h, n_kv, rope.cos, rope.signed_sin, positions, keys, values, slots)

    heads = qkv.view(t, n_h + 2 * n_kv, hd)
    want = rope.apply(heads[:, : n_h + n_kv], rope.tables(positions))
    check(q.view(t, n_h, hd), want[:, :n_h])
    check(keys[slots], want[:, n_h:])
    assert torch.equal(values[slots], heads[:, n_h + n_kv :])
    others = torch.ones(64, dtype=torch.bool)
    others[slots] = False
    assert keys[others].isnan().all() and values[others].isnan().all()


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wide", [False, True], ids=["per-head", "all-heads"])
def test_rope_kv_norms_q_and_k_first_as_the_decoder(dtype, wide):
    """q and k RMS-normed before RoPE, per head (Qwen3's q_norm / k_norm) or over all heads at once (OLMoE's)."""
    n_h, n_kv, hd, t, eps = 4, 2, 32, 3, 1e-6
    cfg = SimpleNamespace(
        rotary_scaling=None, rotary_base=10000.0, head_size=hd, hidden_size=n_h * hd, num_attention_heads=n_h,
        max_position_embeddings=512,
    )  # fmt: skip
    rope = Rope(cfg, 512, dtype, torch.device("cpu"))
    g = torch.Generator().manual_seed(5)
    qkv = (torch.randn(t, (n_h + 2 * n_kv) * hd, generator=g) * 3).to(dtype)
    q_norm, k_norm = ((1 + torch.randn(n * hd if wide else hd, generator=g) / 4).to(dtype) for n in (n_h, n_kv))
    positions, slots = torch.tensor([0, 9, 300]), torch.tensor([5, 0, 7])
    keys, values = torch.zeros(8, n_kv, hd, dtype=dtype), torch.zeros(8, n_kv, hd, dtype=dtype)
    heads = qkv.view(t, n_h + 2 * n_kv, hd).clone()
    q = pointwise.rope_kv(
        qkv, n_h, n_kv, rope.cos, rope.signed_sin, positions, keys, values, slots, q_norm, k_norm, eps
    )

    q_in, k_in = heads[:, :n_h], heads[:, n_h : n_h + n_kv]
    if wide:
        q_in, k_in = q_in.flatten(1), k_in.flatten(1)
    normed = torch.cat([rms_norm(q_in, q_norm, eps).view(t, n_h, hd), rms_norm(k_in, k_norm, eps).view(t, n_kv, hd)], 1)
    want = rope.apply(normed, rope.tables(positions))
    check(q.view(t, n_h, hd), want[:, :n_h])
    check(keys[slots], want[:, n_h:])
    assert torch.equal(values[slots], heads[:, n_h + n_kv :])


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_matches_torch(dtype):
    fc_gate = (torch.randn(7, 2 * 1536, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    fc, gate = fc_gate.chunk(2, dim=-1)
    check(pointwise.act_mul(fc_gate), F.silu(fc) * gate)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_tanh_mul_matches_torch(dtype):
    fc_gate = (torch.randn(7, 2 * 1536, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    fc, gate = fc_gate.chunk(2, dim=-1)
    check(pointwise.act_mul(fc_gate, "gelu_pytorch_tanh"), F.gelu(fc, approximate="tanh") * gate)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_offset_norm_matches_gemmas(dtype):
    g = torch.Generator().manual_seed(1)
    h, w = torch.randn(5, 640, generator=g).to(dtype), (torch.randn(640, generator=g) * 0.1).to(dtype)
    check(pointwise.add_rms_norm(h, None, w, 1e-6, 1.0), rms_norm(h, w, 1e-6, 1.0))


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rot", [0, 12, 16])  # no RoPE (a NoPE layer), partial rotaries of 12 and 16 of 32 dims
def test_rope_kv_rotates_the_first_rotary_dims_only(dtype, rot):
    n_h, n_kv, hd, t = 4, 2, 32, 3
    g = torch.Generator().manual_seed(2)
    qkv = torch.randn(t, (n_h + 2 * n_kv) * hd, generator=g).to(dtype)
    cfg = SimpleNamespace(rotary_scaling=None, rotary_base=10000.0, head_size=hd, rotary_dim=rot or None)
    rope = Rope(cfg, 64, dtype, torch.device("cpu"))
    keys, values = torch.zeros(16, n_kv, hd, dtype=dtype), torch.zeros(16, n_kv, hd, dtype=dtype)
    positions, slots = torch.tensor([5, 0, 63]), torch.tensor([1, 7, 3])
    cos, sin = (rope.cos, rope.signed_sin) if rot else (None, None)
    q = pointwise.rope_kv(qkv.clone(), n_h, n_kv, cos, sin, positions, keys, values, slots)
    heads = qkv.view(t, -1, hd)[:, : n_h + n_kv]
    want = rope.apply(heads, rope.tables(positions)) if rot else heads
    check(q.view(t, n_h, hd), want[:, :n_h])
    check(keys[slots], want[:, n_h:])


def test_strided_or_integer_batches_go_to_torch():
    assert pointwise.usable(torch.zeros(4096, 8))  # prefill-sized batches run here too
    assert not pointwise.usable(torch.zeros(8, 4).t())
    assert not pointwise.usable(torch.zeros(2, 8, dtype=torch.int8))


@needs_kernel
@pytest.mark.parametrize("vocab", [5, 49152, 49155])  # under one vector; whole vectors; a tail
def test_argmax_picks_torchs_index_ties_infs_and_nans_included(vocab):
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(6, vocab, generator=g)
    x[1] = 0.0  # every value tied: the first
    x[1, vocab - 1] = 0.0
    x[2] = float("-inf")  # nothing allowed (a fully masked row): index 0, as torch
    x[3, vocab // 2] = float("nan")  # a NaN wins, as in torch.max
    x[3, vocab - 1] = float("nan")
    x[4, vocab - 1] = 1e9  # the maximum in the tail
    x[5, 0], x[5, vocab - 1] = 1e9, 1e9  # tied at both ends: the first
    assert pointwise.argmax(x) == x.max(dim=-1).indices.tolist()


def test_argmax_leaves_what_it_does_not_take_to_torch():
    x = torch.randn(4, 64)
    for other in (x.to(torch.bfloat16), x[:, ::2], x[0], x[:0]):  # another dtype, strided, 1-D, no rows
        assert pointwise.argmax(other) is None
