"""The AVX2 W4A16 kernel (trtserve/quant/int4_gemm.c) against a float GEMM on the weights it
decodes and against torch's own int4 GEMM on the same pack; Int4Groupwise's choice between them;
and a compile failure that falls back instead of failing the engine."""

from __future__ import annotations

import pytest
import torch

from trtserve.quant import int4_kernel
from trtserve.quant.linear import Int4Groupwise

needs_kernel = pytest.mark.skipif(
    int4_kernel.load() is None, reason="the int4 kernel needs x86-64 with AVX2/FMA and a C compiler"
)


def _pack(q: torch.Tensor) -> torch.Tensor:
    """(N, K) values in [-8, 7] -> torch's CPU int4 pack."""
    return torch._convert_weight_to_int4pack_for_cpu((q.int() + 8).contiguous(), 1)


def _case(n: int, k: int, group: int, dtype: torch.dtype, zeros: bool):
    q = torch.randint(-8, 8, (n, k), dtype=torch.int8)
    scale = torch.rand(k // group, n) / 20 + 1e-3  # (groups, N)
    zero = torch.randn(k // group, n) / 50 if zeros else torch.zeros(k // group, n)
    sz = torch.stack([scale, zero], dim=-1).to(dtype).contiguous()  # (groups, N, 2)
    s, z = (t.float().t().repeat_interleave(group, dim=1) for t in (sz[..., 0], sz[..., 1]))  # (N, K)
    return _pack(q), sz, q.float() * s + z


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 2, 3, 16, 33])
@pytest.mark.parametrize(("n", "k", "group"), [(96, 256, 64), (64, 384, 128)])
def test_kernel_matches_float_gemm_on_the_decoded_weight(dtype, rows, n, k, group):
    packed, sz, w = _case(n, k, group, dtype, zeros=True)
    x = torch.randn(rows, k).to(dtype)
    got = int4_kernel.int4_gemm(x, packed, sz, group)
    assert got.dtype == dtype and got.shape == (rows, n)
    ref = x.float() @ w.T
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: one rounding of the output
    torch.testing.assert_close(got.float(), ref, rtol=tol, atol=tol * ref.abs().max().item())


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 5])
def test_kernel_agrees_with_torchs_int4_gemm(rows):
    packed, sz, _ = _case(128, 512, 64, torch.bfloat16, zeros=True)
    x = torch.randn(rows, 512, dtype=torch.bfloat16)
    ours = int4_kernel.int4_gemm(x, packed, sz, 64).float()
    theirs = torch._weight_int4pack_mm_for_cpu(x, packed, 64, sz).float()
    assert torch.nn.functional.cosine_similarity(ours.flatten(), theirs.flatten(), dim=0) > 0.99999


def _groupwise(n: int, k: int, dtype: torch.dtype) -> tuple[Int4Groupwise, torch.Tensor]:
    q = torch.randint(-8, 8, (n, k), dtype=torch.int8)
    lo, hi = q[0::2].to(torch.uint8) & 15, q[1::2].to(torch.uint8) & 15
    s = torch.rand(n, k // 64) / 10
    lin = Int4Groupwise({"weight": (lo | (hi << 4)).view(torch.int8), "weights_scaling_factor": s}, dtype, 64)
    return lin, q.float() * s.to(dtype).float().repeat_interleave(64, dim=1)


@needs_kernel
def test_groupwise_routes_decode_rows_to_the_kernel_and_prefill_to_torch(monkeypatch):
    lin, w = _groupwise(64, 128, torch.bfloat16)
    assert lin.kernel
    calls = []
    real = int4_kernel.int4_gemm
    monkeypatch.setattr(int4_kernel, "int4_gemm", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    for rows in (1, Int4Groupwise.KERNEL_MAX_ROWS, Int4Groupwise.KERNEL_MAX_ROWS + 1):
        x = torch.randn(rows, 128, dtype=torch.bfloat16)
        torch.testing.assert_close(lin(x).float(), x.float() @ w.T, rtol=1e-2, atol=5e-2)
    assert calls == [1, Int4Groupwise.KERNEL_MAX_ROWS]  # bf16 prefill: torch's kernel


def test_groupwise_without_the_kernel_uses_torchs(monkeypatch):
    monkeypatch.setattr(int4_kernel, "supports", lambda *a: False)
    lin, w = _groupwise(48, 128, torch.float32)  # 48 rows: not a whole 32-row block either
    assert not lin.kernel
    x = torch.randn(2, 128)
    torch.testing.assert_close(lin(x), x @ w.T, rtol=1e-4, atol=1e-4)


def test_a_kernel_that_does_not_compile_falls_back(monkeypatch, tmp_path):
    bad = tmp_path / "broken.c"
    bad.write_text("this is not C\n")
    monkeypatch.setattr(int4_kernel, "SOURCE", bad)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(int4_kernel, "_cpu_has_avx2_fma", lambda: True)
    int4_kernel.load.cache_clear()
    try:
        assert int4_kernel.load() is None
        assert not int4_kernel.supports(torch.float32, 64)
        assert not list((tmp_path / "cache").rglob("*.tmp"))  # nothing half-written left in the cache
    finally:
        int4_kernel.load.cache_clear()
