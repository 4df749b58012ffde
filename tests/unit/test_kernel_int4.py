"""The AVX2 W4A16 kernel (trtserve/kernels/int4_gemm.c) against a float GEMM on the weights it
decodes and against torch's own int4 GEMM on the same pack; Int4Groupwise's choice between them,
and the one-call decode step taking int4 layers only for the rows that choice gives this kernel;
and a compile failure that falls back instead of failing the engine."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch

from trtserve.kernels import decode_layers, native
from trtserve.kernels import int4 as int4_kernel
from trtserve.models import quantized
from trtserve.models.quantized import Int4Groupwise

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
@pytest.mark.parametrize(("n", "k", "group"), [(192, 256, 64), (64, 384, 128)])
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
@pytest.mark.parametrize("block_n", [32, 64])
@pytest.mark.parametrize("wide", [False, True])  # our kernel's AVX-512 build (native.avx512_build)
def test_groupwise_routes_inputs_to_the_faster_kernel(monkeypatch, block_n, wide):
    """float32 inputs always go to ours; bf16 decode rows where torch packs for AVX2 (32-wide
    blocks), or up to 2 rows against torch's AVX-512 kernel with our AVX-512 build; bf16 prefill,
    and the rest, to torch's."""
    lin, w = _groupwise(128, 128, torch.bfloat16)
    lin32, w32 = _groupwise(128, 128, torch.float32)
    assert lin.kernel and lin32.kernel
    monkeypatch.setattr(int4_kernel, "block_n", lambda: block_n)
    monkeypatch.setattr(int4_kernel.native, "avx512_build", lambda: wide)
    calls = []

    def recorded(x, packed, sz, group, int8_activations=False):  # torch's kernel: right whatever the pack layout
        calls.append((x.dtype, x.shape[0]))
        return torch._weight_int4pack_mm_for_cpu(x, packed, group, sz)

    monkeypatch.setattr(int4_kernel, "int4_gemm", recorded)
    top = int4_kernel.BF16_MAX_ROWS
    sizes = (1, 2, 3, top, top + 1)
    for rows in sizes:
        for layer, ref, dtype in ((lin, w, torch.bfloat16), (lin32, w32, torch.float32)):
            x = torch.randn(rows, 128, dtype=dtype)
            torch.testing.assert_close(layer(x).float(), x.float() @ ref.T, rtol=1e-2, atol=5e-2)
    f32 = [(torch.float32, r) for r in sizes]
    most = top if block_n == 32 else int4_kernel.BF16_WIDE_ROWS if wide else 0
    bf16 = [(torch.bfloat16, r) for r in sizes if r <= most]
    assert sorted(calls, key=str) == sorted(f32 + bf16, key=str)


needs_int8_activations = pytest.mark.skipif(
    not int4_kernel.int8_activations_available(), reason="needs the kernels' AVX-512 build with VNNI and VBMI"
)


def _int8_rounded_product(x: torch.Tensor, q: torch.Tensor, sz: torch.Tensor, group: int) -> torch.Tensor:
    """What the int8-activation path computes, in float64: each row of x rounded to int8 per group
    (d = amax / 127 and x * (1 / d) rounded to nearest even, in float32, as int4.h), the integer dots
    with q + 8 in [0, 15], then d * (scale * (dot - 8 sum x_q) + zero * sum x_q) summed over groups."""
    rows, k = x.shape
    xg = x.float().view(rows, k // group, group)
    d = xg.abs().amax(dim=-1, keepdim=True) / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    xq = (xg * inv).round().clamp(-127, 127).double()  # (rows, groups, group)
    qg = (q.double() + 8).view(q.shape[0], k // group, group)  # (N, groups, group)
    dots = torch.einsum("rgk,ngk->rgn", xq, qg)  # (rows, groups, N)
    sums = xq.sum(dim=-1, keepdim=True)  # (rows, groups, 1)
    scale, zero = sz[..., 0].double(), sz[..., 1].double()  # (groups, N)
    return (d.double() * (scale * (dots - 8 * sums) + zero * sums)).sum(dim=1)  # (rows, N)


@needs_int8_activations
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 2, 3, 8])
@pytest.mark.parametrize(("n", "k", "group"), [(192, 256, 64), (64, 384, 128), (128, 128, 32)])
def test_int8_activations_compute_the_int8_rounded_product(dtype, rows, n, k, group):
    """The opt-in path: exact integer dots of the int8-rounded activations (checked against them to
    float32 accuracy), which the float path does not compute (it differs by the rounding)."""
    q = torch.randint(-8, 8, (n, k), dtype=torch.int8)
    scale, zero = torch.rand(k // group, n) / 20 + 1e-3, torch.randn(k // group, n) / 50
    sz = torch.stack([scale, zero], dim=-1).to(dtype).contiguous()
    x = torch.randn(rows, k).to(dtype)
    x[0, 5] = 0.0  # a group of all zeros too
    x[-1, :group] = 0.0
    got = int4_kernel.int4_gemm(x, _pack(q), sz, group, int8_activations=True)
    assert got.dtype == dtype and got.shape == (rows, n)
    want = _int8_rounded_product(x, q, sz, group)
    tol = 2e-6 if dtype == torch.float32 else 8e-3  # bf16: one rounding of the output
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * want.abs().max().item())
    if dtype == torch.float32:  # bf16's output rounding hides the difference
        exact = int4_kernel.int4_gemm(x, _pack(q), sz, group).double()
        assert (exact - want).abs().max() > 20 * tol * want.abs().max()


@needs_int8_activations
def test_groupwise_takes_int8_activations_to_our_kernel_for_every_decode_row(monkeypatch):
    lin, w = _groupwise(128, 128, torch.bfloat16)
    lin.int8_activations = True
    calls = []
    real = int4_kernel.int4_gemm

    def recorded(x, packed, sz, group, int8_activations=False):
        calls.append((x.shape[0], int8_activations))
        return real(x, packed, sz, group, int8_activations)

    monkeypatch.setattr(int4_kernel, "int4_gemm", recorded)
    for rows in (1, 3, int4_kernel.Q8_MAX_ROWS - 1, int4_kernel.Q8_MAX_ROWS):
        x = torch.randn(rows, 128, dtype=torch.bfloat16)
        torch.testing.assert_close(lin(x).float(), x.float() @ w.T, rtol=5e-2, atol=0.15)
    assert calls == [(1, True), (3, True), (int4_kernel.Q8_MAX_ROWS - 1, True)]  # prefill: widened slabs


@needs_kernel
def test_decode_step_takes_int4_layers_for_the_rows_the_per_op_path_gives_this_kernel():
    shapes = {"qkv": (256, 128), "dense": (128, 128), "fc_gate": (256, 128), "proj": (128, 128)}

    def layers(dtype: torch.dtype) -> list[SimpleNamespace]:
        lin = {f: _groupwise(n, k, dtype)[0] for f, (n, k) in shapes.items()}
        norms = {"input_norm": torch.ones(128, dtype=dtype), "post_norm": torch.ones(128, dtype=dtype)}
        biases = dict(qkv_bias=None, fc_gate_bias=None, proj_bias=None)
        extra = dict(attn_out_norm=None, mlp_out_norm=None, dense_bias=None, sinks=None)
        return [SimpleNamespace(**lin, **norms, **biases, **extra, experts=None, q_norm=None, k_norm=None)]

    step = decode_layers.Step(tables=[None], windows=[None], rotary_dim=0)  # one layer, no RoPE

    f32 = decode_layers.pack(layers(torch.float32), torch.float32, shapes, step)
    assert f32.wdt == decode_layers.INT4 and f32.max_rows == quantized._INT4_SLAB_ROWS - 1  # then slabs
    bf16 = decode_layers.pack(layers(torch.bfloat16), torch.bfloat16, shapes, step)
    if int4_kernel.block_n() == 32:
        assert bf16.max_rows == int4_kernel.BF16_MAX_ROWS  # then torch's kernel
    elif int4_kernel.native.avx512_build():
        assert bf16.max_rows == int4_kernel.BF16_WIDE_ROWS  # then torch's AVX-512 kernel
    else:
        assert bf16 is None  # torch's AVX-512 kernel runs bf16 decode rows
    awq = layers(torch.float32)
    awq[0].proj.pre_quant = torch.ones(128)  # an AWQ scale not folded into the norm
    assert decode_layers.pack(awq, torch.float32, shapes, step) is None
    assert decode_layers.pack(layers(torch.float32), torch.float32, {**shapes, "dense": (96, 128)}, step) is None


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
    monkeypatch.setattr(native, "cpu_has_avx2_fma", lambda: True)
    int4_kernel.load.cache_clear()
    native.library.cache_clear()
    try:
        assert int4_kernel.load() is None
        assert not int4_kernel.supports(torch.float32, 64)
        assert not list((tmp_path / "cache").rglob("*.tmp"))  # nothing half-written left in the cache
    finally:
        int4_kernel.load.cache_clear()
        native.library.cache_clear()


def _pack_blocks(q: torch.Tensor, bn: int) -> torch.Tensor:
    """q (N, K) in [0, 15] in int4.h's layout with bn-output blocks, which torch's pack (_pack) fixes by
    its own build: [N/bn][K][bn/2] bytes, byte j of row k of block b holding output bn*b+j
    (low nibble) and bn*b+j+bn/2 (high)."""
    n, k = q.shape
    blocks = q.view(n // bn, 2, bn // 2, k).to(torch.uint8)  # [b][low/high][j][k]
    return (blocks[:, 0] | (blocks[:, 1] << 4)).transpose(1, 2).contiguous()  # [b][k][j]


@pytest.mark.skipif(not native.avx512_build() or not shutil.which("cc"), reason="needs the AVX-512 build's CPU and cc")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bn", [32, 64])  # 32-output units in both builds; 64: whole blocks in the AVX-512 one
def test_avx512_build_gives_the_avx2_builds_bits(tmp_path, dtype, bn):
    """int4.h's 16-lane code (and its whole-block units) keeps every output's operations and order."""
    fns = {}
    for name, flags in (("avx2", native.FLAGS), ("avx512", native.FLAGS + native.AVX512)):
        so = tmp_path / f"{name}.so"
        subprocess.run(["cc", *flags, "-o", str(so), str(int4_kernel.SOURCE)], check=True, capture_output=True)
        fns[name] = ctypes.CDLL(str(so)).trtserve_int4_gemm
        fns[name].argtypes = [{"p": ctypes.c_void_p, "i": ctypes.c_int, "l": ctypes.c_int64}[c] for c in "pillpllpilpi"]
    g = torch.Generator().manual_seed(4)
    for n, k, gs in ((192, 256, 64), (128, 320, 32)):
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=g)
        packed = _pack_blocks(q, bn)
        if bn == int4_kernel.block_n():  # the hand-made layout is torch's
            assert torch.equal(
                packed.flatten(), torch._convert_weight_to_int4pack_for_cpu(q, 1).view(torch.uint8).flatten()
            )
        sz = (torch.randn(k // gs, n, 2, generator=g) / 10).to(dtype)
        w = (q.float() - 8) * sz[..., 0].float().repeat_interleave(gs, 0).T + sz[..., 1].float().repeat_interleave(
            gs, 0
        ).T
        for rows in (1, 2, 3, 8):
            x, bf = torch.randn(rows, k, generator=g).to(dtype), int(dtype == torch.bfloat16)
            ys = []
            for fn in fns.values():
                y = torch.empty(rows, n, dtype=dtype)
                assert (
                    fn(x.data_ptr(), bf, rows, k, packed.data_ptr(), n, bn, sz.data_ptr(), bf, gs, y.data_ptr(), 2) == 0
                )
                ys.append(y)
            assert torch.equal(*ys), (n, k, gs, rows)
            torch.testing.assert_close(ys[0].float(), x.float() @ w.T, rtol=2e-2, atol=5e-2)
