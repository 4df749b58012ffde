"""The AVX2 dense decode kernel (trtserve/kernels/dense_gemv.c) against a float64 GEMM, in each
dtype, with shapes that leave tails (N not a multiple of its 4-row blocks, K not of 8 or of its
512-wide chunks); and `dense.linear`'s choice between it and torch's GEMM."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from trtserve.kernels import dense, native

needs_kernel = pytest.mark.skipif(
    dense.load() is None, reason="the dense kernel needs x86-64 with AVX2/FMA/F16C and a C compiler"
)
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


@needs_kernel
@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("rows", [1, 2, 3, 7, dense.MAX_ROWS])
@pytest.mark.parametrize(("n", "k"), [(13, 7), (64, 128), (101, 1030), (960, 576), (37, 2100)])
def test_kernel_matches_a_float64_gemm(dtype, rows, n, k):
    g = torch.Generator().manual_seed(n * k + rows)
    x = torch.randn(rows, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    ref = x.double() @ w.double().T + b.double()
    got = dense.linear(x, w, b)
    assert got.dtype == dtype and got.shape == (rows, n)
    err = (got.double() - ref).abs().max() / ref.abs().max()
    assert err < TOL[dtype], f"relative error {err:.2e}"


@needs_kernel
def test_linear_runs_the_kernel_only_for_decode_batches_in_the_weights_dtype(monkeypatch):
    calls = []
    real = dense.load()
    monkeypatch.setattr(dense, "load", lambda: lambda *a: calls.append(a[2]) or real(*a))  # a[2]: rows
    w = torch.randn(32, 64)
    top = dense.max_rows(torch.float32)
    for rows in (1, top, top + 1):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(dense.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    dense.linear(torch.randn(1, 64, dtype=torch.bfloat16), w.bfloat16().t().contiguous().t())  # a strided weight
    dense.linear(torch.randn(2, 1, 64), w)  # 3-D x
    assert calls == [1, top]


@needs_kernel
@pytest.mark.parametrize(("n", "k"), [(37, 70), (960, 576), (50, 2100)])  # tails of 16 outputs and 32 inputs
def test_bf16_rows_keep_their_bits_in_any_batch_within_a_kernel_path(n, k):
    """A row's bits do not depend on the batch up to dense.same_bits_rows; past it (AMX's tile multiplies,
    amx.h) they do not depend on the batch either, among the batches of that path."""
    g = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=g).bfloat16()
    x = torch.randn(dense.MAX_ROWS, k, generator=g).bfloat16()
    same = dense.same_bits_rows(torch.bfloat16)
    alone = torch.cat([dense.gemm(x[i : i + 1], w) for i in range(same)])
    for rows in sorted({min(2, same), min(3, same), same}):
        assert torch.equal(dense.gemm(x[:rows], w), alone[:rows]), rows
    top = dense.max_rows(torch.bfloat16)
    if top > same:  # the first batch size of the other path: each row repeated to fill it
        first = same + 1
        own = torch.cat([dense.gemm(x[i : i + 1].expand(first, k).contiguous(), w)[:1] for i in range(top)])
        for rows in sorted({first, 13, 16, 17, 33, top}):
            assert torch.equal(dense.gemm(x[:rows], w), own[:rows]), rows


def test_linear_without_the_kernel_is_torchs(monkeypatch):
    monkeypatch.setattr(dense, "load", lambda: None)
    x, w, b = torch.randn(2, 64), torch.randn(32, 64), torch.randn(32)
    torch.testing.assert_close(dense.linear(x, w, b), F.linear(x, w, b))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_float32_prompts_on_onednn_give_torchs_values(monkeypatch):
    """Where dense.onednn_float32 holds (AMD CPUs with AVX-512), prompt-sized float32 GEMMs run on oneDNN:
    the values of torch's `linear`, with and without a bias, for a strided x too; other dtypes stay torch's."""
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(dense, "onednn_float32", lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].shape) or real(*a))
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(96, 200, generator=g), torch.randn(96, generator=g)
    rows = dense.MAX_ROWS + 7
    for x in (torch.randn(rows, 200, generator=g), torch.randn(200, rows, generator=g).t()):
        for bias in (None, b):
            torch.testing.assert_close(dense.linear(x, w, bias), F.linear(x, w, bias), rtol=1e-5, atol=1e-4)
    assert calls == [(rows, 200)] * 4
    dense.linear(torch.randn(rows, 200).bfloat16(), w.bfloat16())
    assert len(calls) == 4


@needs_kernel
@pytest.mark.parametrize("rows", [1, 3, dense.MAX_ROWS])
@pytest.mark.parametrize(("n", "k"), [(13, 7), (101, 1030)])
def test_int8_weights_with_per_output_scales(rows, n, k):
    """W8A16 at float32 activations: y = (x @ q^T) * scale, q int8 (out, in), scale float32 (out,)."""
    g = torch.Generator().manual_seed(n + k + rows)
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) / 50
    x = torch.randn(rows, k, generator=g)
    # the kernel takes up to MAX_ROWS; dense.linear routes it the rows it beats torch at on this CPU
    assert dense.usable(x, q) == (rows <= dense.max_rows(torch.float32))
    assert dense.usable(x.bfloat16(), q) == (rows <= dense.max_rows(torch.bfloat16))
    ref = (x.double() @ q.double().T) * scale.double()
    err = (dense.gemm(x, q, scale).double() - ref).abs().max() / ref.abs().max()
    assert err < 1e-5, f"relative error {err:.2e}"


AVX512 = ("avx512f", "avx512dq", "avx512bw", "avx512vl")


@pytest.mark.parametrize(
    ("vendor", "flags", "f32_rows", "bf16_rows"),
    [
        ("AuthenticAMD", {"avx2", "fma"}, dense.MAX_ROWS, dense.MAX_ROWS),  # Zen 3: torch emulates bf16
        ("AuthenticAMD", {"avx2", "fma", *AVX512, "avx512_bf16"}, dense.MAX_ROWS, dense.BF16_DOT_ROWS),  # Zen 4
        ("GenuineIntel", {"avx2", "fma", *AVX512, "avx512_bf16"}, dense.MAX_ROWS, dense.BF16_DOT_ROWS),
        ("GenuineIntel", {"avx2", "fma", *AVX512, "avx512_bf16", "amx_bf16"}, dense.MAX_ROWS, 4),  # torch's AMX
        ("GenuineIntel", {"avx2", "fma", *AVX512, "amx_tile", "amx_bf16"}, dense.MAX_ROWS, dense.MAX_ROWS),  # amx.h
        ("GenuineIntel", {"avx2", "fma", "avx512f", "avx512_bf16"}, 8, 2),  # no DQ/BW/VL: AVX2 build
        ("GenuineIntel", {"avx2", "fma"}, dense.MAX_ROWS, dense.MAX_ROWS),
    ],
)
def test_max_rows_by_cpu(monkeypatch, vendor, flags, f32_rows, bf16_rows):
    """The rows the kernel takes before torch's GEMM, by what torch's GEMM runs on the CPU (measured
    crossovers in dense.max_rows' docstring)."""
    monkeypatch.setattr(dense.native, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(dense.native, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(dense.native, "_compiler_takes", lambda extra: True)
    dense.max_rows.cache_clear()
    try:
        assert (dense.max_rows(torch.float32), dense.max_rows(torch.bfloat16)) == (f32_rows, bf16_rows)
        if "avx512_bf16" in flags and "amx_bf16" not in flags and set(AVX512) <= flags:  # an older compiler
            monkeypatch.setattr(dense.native, "_compiler_takes", lambda extra: False)
            dense.max_rows.cache_clear()
            assert dense.max_rows(torch.bfloat16) == dense.BF16_WIDE_ROWS
    finally:
        dense.max_rows.cache_clear()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_wide_half_precision_batches_run_in_float32_without_native_instructions(monkeypatch, dtype):
    """On a CPU without bf16/fp16 matmul instructions a prefill-sized batch runs as a float32 GEMM
    over the upcast weight (torch emulates the half-precision one ~4x slower): the same values up to
    summation order, with the bias added after rounding as on the other paths."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(dense.UPCAST_ROWS, 96, generator=g).to(dtype)
    w, b = torch.randn(40, 96, generator=g).to(dtype), torch.randn(40, generator=g).to(dtype)
    monkeypatch.setattr(dense.native, "cpu_flags", lambda: frozenset({"avx2", "fma", "f16c"}))
    assert dense.upcast(x, w) and not dense.upcast(x[:-1], w)
    want = (F.linear(x.float(), w.float()).to(dtype) + b).float()
    torch.testing.assert_close(dense.linear(x, w, b).float(), want, rtol=0, atol=0)
    torch.testing.assert_close(dense.linear(x, w, b).float(), F.linear(x, w, b).float(), rtol=2e-2, atol=2e-2)
    monkeypatch.setattr(dense.native, "cpu_flags", lambda: frozenset(dense.NATIVE[dtype]))
    assert not dense.upcast(x, w)  # native bf16 / fp16 GEMMs (AMX, AVX-512) stay torch's


@pytest.mark.skipif(
    not native.cpu_has_avx2_fma() or not shutil.which("cc"), reason="needs x86-64 with AVX2/FMA/F16C and cc"
)
@pytest.mark.parametrize("source", sorted(p.name for p in Path(native.__file__).parent.glob("*.c")))
@pytest.mark.parametrize("wide", [False, True])
def test_every_kernel_compiles_with_either_build(monkeypatch, tmp_path, source, wide):
    """A kernel that fails to compile falls back to torch quietly, and the kernel tests then skip: so
    each source must compile, in the AVX2 build and in the AVX-512 one (native.avx512_build)."""
    monkeypatch.setattr(native, "avx512_build", lambda: wide)
    bf16_dots = wide and native._compiler_takes(
        tuple(native.AVX512_BF16.values())
    )  # the compiler's, whatever this CPU has
    monkeypatch.setattr(native, "avx512_bf16", lambda: bf16_dots)
    # -O0: what fails to compile fails at any level, in a tenth of the time
    monkeypatch.setattr(native, "FLAGS", tuple("-O0" if f == "-O3" else f for f in native.FLAGS))
    so = tmp_path / "k.so"
    assert native._compile(shutil.which("cc"), Path(native.__file__).parent / source, so), source
    assert so.exists()
