"""The slab widening of quantized weights (trtserve/kernels/widen.py, models/quantized.py) against the
per-format formulas it replaced: the widened weights and the e4m3-rounded activations equal them bit
for bit, with the C kernel and with its torch fallback; the linears' outputs equal a GEMM over the
whole dequantized weight up to float32 summation order."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trtserve.kernels import native, widen
from trtserve.models import quantized
from trtserve.models.quantized import make_linear, slab_linear, unpack_int4_rows

DTYPES = [torch.float32, torch.bfloat16]
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


@pytest.fixture(params=["kernel", "kernel-avx2", "torch"])
def path(request, monkeypatch):
    """Each test over the C kernel, its AVX2 build where this machine's is the AVX-512 one (whose
    vpermps lookups the AVX2 build has not), and the torch ops that stand in for it."""
    if request.param.startswith("kernel"):
        if not widen.available():
            pytest.skip("the widening kernel cannot be built here")
        if request.param == "kernel-avx2":
            if not native.avx512_build():
                pytest.skip("this machine's build is the AVX2 one")
            monkeypatch.setattr(native, "avx512_build", lambda: False)
            for cached in (widen._fn, native.library):
                cached.cache_clear()
            request.addfinalizer(widen._fn.cache_clear)
            request.addfinalizer(native.library.cache_clear)
    else:
        monkeypatch.setattr(widen, "_fn", lambda name: None)
    return request.param


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (float32 NaNs of the same bits included, which torch.equal calls unequal). A bf16
    NaN's bits depend on which of torch's own float32 -> bf16 conversions ran (0x7FC0 scalar, 0xFFFF
    in its AVX2 / AVX-512 loops, the sign kept by AVX512-BF16's instruction): bf16 NaNs match NaNs."""
    if a.dtype != b.dtype:
        return False
    if a.dtype == torch.bfloat16:
        nan = a.isnan()
        return torch.equal(nan, b.isnan()) and torch.equal(a[~nan].view(torch.int16), b[~nan].view(torch.int16))
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


# The formulas of the per-call dequantization that slab widening replaced.
def old_fake_quant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    mult = 448.0 / (scale.float() * 448.0)
    q = (x.float() * mult).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return (q.float() * (1 / mult)).to(x.dtype)


def old_awq(t: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    w = unpack_int4_rows(t["weight"]).float()
    scale = t["weights_scaling_factor"].float()
    w = w * scale.repeat_interleave(w.shape[1] // scale.shape[1], dim=1)
    return old_fake_quant(w, t["weights_scaling_factor_2"].float()).to(dtype)


def old_nvfp4(t: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    p = t["weight"].view(torch.uint8)
    w = E2M1[torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1).long()]
    s = t["weights_scaling_factor"].float() * t["weights_scaling_factor_2"].float()
    return (w.view(w.shape[0], s.shape[1], -1) * s[..., None]).view(w.shape).to(dtype)


def awq_tensors(out: int, k: int, group: int = 128) -> dict[str, torch.Tensor]:
    return {
        "weight": torch.randint(-128, 128, (out // 2, k), dtype=torch.int8),
        "weights_scaling_factor": torch.rand(out, k // group) / 10,
        "weights_scaling_factor_2": torch.tensor([0.0007]),  # some products past 448 steps: clamped
        "activation_scaling_factor": torch.tensor([0.01]),
        "prequant_scaling_factor": torch.rand(k) + 0.5,
    }


def nvfp4_tensors(out: int, k: int) -> dict[str, torch.Tensor]:
    return {
        "weight": torch.randint(0, 256, (out, k // 2), dtype=torch.uint8),
        "weights_scaling_factor": (torch.rand(out, k // 16) * 3 + 0.001).to(torch.float8_e4m3fn),
        "weights_scaling_factor_2": torch.tensor([0.013]),
    }


def fp8_tensors(out: int, k: int, per_channel: bool) -> dict[str, torch.Tensor]:
    w = (torch.randn(out, k) * 60).clamp(-448, 448).to(torch.float8_e4m3fn)
    if per_channel:
        return {"weight": w, "per_channel_scale": torch.rand(out) / 100}
    return {
        "weight": w,
        "weights_scaling_factor": torch.tensor([0.0123]),
        "activation_scaling_factor": torch.tensor([0.02]),
    }


def widened(lin, out: int, k: int, *args) -> torch.Tensor:
    w = torch.empty(out, k)
    lin.widen_rows(0, out, w, *args)
    return w


def awkward_rows(dtype: torch.dtype) -> torch.Tensor:
    """(rows, 64): random bit patterns (subnormals, huge, tiny), a ramp across e4m3's range, normal
    noise; then a row with an inf and one with a NaN (per-token scales of inf and NaN)."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 18,), generator=g, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = torch.cat([x[torch.isfinite(x)][: 1 << 17], torch.linspace(-500, 500, 1 << 16), torch.randn(1 << 16) * 1e-3])
    special = torch.randn(2, 64)
    special[0, 5], special[1, 40] = -float("inf"), float("nan")
    return torch.cat([x[: x.numel() // 64 * 64].view(-1, 64), special]).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("held", DTYPES)  # the dtype handed to the GEMM: float32, or bf16 where it runs bf16
def test_fp8_round_equals_torchs_e4m3_conversion_on_every_kind_of_float(path, dtype, held):
    if held == torch.bfloat16 and dtype != held:
        pytest.skip("bf16 holds values of bf16 only")
    x = awkward_rows(dtype)
    per_token = x.float().abs().amax(dim=-1, keepdim=True).clamp_min(2**-24) / 448  # (rows, 1)
    for scale in (torch.tensor([1.0]), torch.tensor([0.037]), per_token):
        mult = 448.0 / (scale.float() * 448.0)
        got = widen.fp8_round(x, mult, 1 / mult, dtype, held)
        assert got.dtype == held
        assert same(got.to(dtype), old_fake_quant(x, scale))
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(2**-24)  # Fp8Linear's old per-token scale
    got = widen.fp8_round(x, None, None, dtype, held)
    assert got.dtype == held and same(got.to(dtype), old_fake_quant(x, amax / 448))


def test_per_token_int8_rounding_and_scales_equal_the_old_formula(path):
    x = torch.cat([awkward_rows(torch.float32), torch.zeros(1, 64)])
    xf = x.float()
    scale = xf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-8) / 127
    q, got_scale = widen.int8_round(x)
    assert same(q, (xf / scale).round_().clamp_(-127, 127)) and same(got_scale, scale)
    y, col = torch.randn(x.shape[0], 40), torch.rand(40)
    assert same(widen.scale_outer(y.clone(), scale, col), y * (scale * col))
    # AMX-INT8's int32 sums, scaled straight into the activation dtype
    acc = torch.randint(-(2**30), 2**30, (x.shape[0], 40), dtype=torch.int32)
    for dtype in DTYPES:
        assert same(widen.scale_outer(acc, scale, col, dtype), (acc.float() * (scale * col)).to(dtype))
        # a per-channel scale (no row's) on a GEMM's output in its dtype, in place
        out, ch = torch.randn(x.shape[0], 40).to(dtype), torch.rand(40).to(dtype)
        want = out * ch
        assert same(widen.scale_outer(out, None, ch, dtype), want) and same(out, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_widened_awq_weights_equal_the_old_dequantization(path, dtype):
    t = awq_tensors(96, 256)
    lin = make_linear(t, "W4A8_AWQ", dtype)
    assert same(widened(lin, 96, 256, dtype), old_awq(t, dtype).float())
    part = torch.empty(32, 256)  # a slab inside: rows 32:64
    lin.widen_rows(32, 64, part, dtype)
    assert same(part, old_awq(t, dtype).float()[32:64])


@pytest.mark.parametrize("dtype", DTYPES)
def test_widened_nvfp4_weights_equal_the_old_dequantization(path, dtype):
    t = nvfp4_tensors(48, 128)
    lin = make_linear(t, "NVFP4", dtype)
    assert same(widened(lin, 48, 128, dtype), old_nvfp4(t, dtype).float())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_widened_fp8_weights_equal_the_old_dequantization(path, dtype, per_channel):
    t = fp8_tensors(40, 64, per_channel)
    lin = make_linear(t, "FP8_PER_CHANNEL_PER_TOKEN" if per_channel else "FP8", dtype)
    old = t["weight"].to(dtype) if per_channel else t["weight"].to(dtype) * t["weights_scaling_factor"].to(dtype)
    assert same(widened(lin, 40, 64, lin.lut(dtype)), old.float())


def test_widened_int8_weights_are_their_values(path):
    w = torch.randint(-128, 128, (24, 32), dtype=torch.int8)
    for algo in ("W8A16", "W8A8_SQ_PER_CHANNEL"):
        lin = make_linear({"weight": w, "weights_scaling_factor": torch.rand(24)}, algo, torch.float32)
        assert same(widened(lin, 24, 32), w.float())


def int4_pack(out: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (out, k) in [-8, 7], its TensorRT-LLM packing (out / 2, k))"""
    q = torch.randint(-8, 8, (out, k), dtype=torch.int8)
    return q, ((q[0::2].to(torch.uint8) & 15) | ((q[1::2].to(torch.uint8) & 15) << 4)).view(torch.int8)


def bf16_engine_linear(algo: str, out: int, k: int):
    """A bf16 engine's linear of `algo` and its widen_rows(a, b, out) with the format's extra argument."""
    i8 = {"weight": torch.randint(-128, 128, (out, k), dtype=torch.int8), "weights_scaling_factor": torch.rand(out)}
    tensors = {
        "W8A16": lambda: i8,
        "W8A8_SQ_PER_CHANNEL": lambda: i8,
        "W4A16_AWQ": lambda: {"weight": int4_pack(out, k)[1], "weights_scaling_factor": torch.rand(out, k // 64) / 10},
        "W4A8_AWQ": lambda: awq_tensors(out, k, 64),
        "NVFP4": lambda: nvfp4_tensors(out, k),
        "FP8": lambda: fp8_tensors(out, k, False),
        "FP8_PER_CHANNEL_PER_TOKEN": lambda: fp8_tensors(out, k, True),
    }[algo]()
    lin = make_linear(tensors, algo, torch.bfloat16, 64)
    extra = {"W4A8_AWQ": (torch.bfloat16,), "NVFP4": (torch.bfloat16,)}.get(algo, ())
    if algo.startswith("FP8"):
        extra = (lin.lut(torch.bfloat16),)
    return lin, lambda a, b, w: lin.widen_rows(a, b, w, *extra)


@pytest.mark.parametrize(
    "algo", ["W8A16", "W8A8_SQ_PER_CHANNEL", "W4A16_AWQ", "W4A8_AWQ", "NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN"]
)
def test_bf16_slabs_hold_the_float32_slabs_values_rounded(path, algo):
    """A bf16 GEMM's slab is widened straight to bf16: the values of the float32 slab rounded to bf16,
    bit for bit, whole and a part; row-major, and k-major (a column slice of an (in, rows) array, as
    slab_linear hands W4A16's pack)."""
    out, k = 192, 256
    lin, widen_rows = bf16_engine_linear(algo, out, k)
    if algo == "W4A16_AWQ" and not lin.kernel:
        pytest.skip("no int4 pack layout known here")
    f32 = torch.empty(out, k)
    widen_rows(0, out, f32)
    for a, b in ((0, out), (24, 64)):
        rows = torch.empty(b - a, k, dtype=torch.bfloat16)
        widen_rows(a, b, rows)
        assert same(rows, f32[a:b].to(torch.bfloat16))
        if algo == "W4A16_AWQ":
            kmajor = torch.empty(k, b - a + 8, dtype=torch.bfloat16).t()[: b - a]  # row stride b - a + 8
            widen_rows(a, b, kmajor)
            assert same(kmajor.contiguous(), f32[a:b].to(torch.bfloat16))


def reference(algo: str, t: dict[str, torch.Tensor], x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The linear in float32 over the whole weight as the old per-call code dequantized it."""
    if algo == "W4A8_AWQ":
        xq = old_fake_quant(x * t["prequant_scaling_factor"].to(x.dtype), t["activation_scaling_factor"])
        return F.linear(xq.float(), old_awq(t, x.dtype).float(), bias.float())
    if algo == "NVFP4":
        return F.linear(x.float(), old_nvfp4(t, x.dtype).float(), bias.float())
    if algo == "FP8":
        w = t["weight"].to(x.dtype) * t["weights_scaling_factor"].to(x.dtype)
        xq = old_fake_quant(x, t["activation_scaling_factor"])
        return F.linear(xq.float(), w.float(), bias.float())
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(2**-24)
    xq = old_fake_quant(x, amax / 448)
    y = F.linear(xq.float(), t["weight"].float()) * t["per_channel_scale"].to(x.dtype).float()
    return y + bias.float()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("algo", ["W4A8_AWQ", "NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN"])
@pytest.mark.parametrize("tokens", [3, 80])  # decode rows; prefill rows (float32 GEMM for bf16 on CPUs without bf16)
def test_slab_linear_equals_the_gemm_over_the_whole_weight(path, monkeypatch, dtype, algo, tokens):
    monkeypatch.setattr(quantized, "_SLAB_BYTES", 64 * 256 * 4)  # slabs of 64 rows (float32) or 128 (bf16), one ragged
    out, k = 208, 256
    make = {"W4A8_AWQ": awq_tensors, "NVFP4": nvfp4_tensors}
    t = make[algo](out, k) if algo in make else fp8_tensors(out, k, algo != "FP8")
    x, bias = torch.randn(tokens, k).to(dtype), torch.randn(out).to(dtype)
    got = make_linear(t, algo, dtype)(x, bias)
    assert got.dtype == dtype and got.shape == (tokens, out)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), reference(algo, t, x, bias), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("algo", ["W8A16", "W8A8_SQ_PER_CHANNEL"])
@pytest.mark.parametrize("tokens", [3, 70])  # decode rows (the int8 decode kernel where it builds); prefill rows
@pytest.mark.parametrize("amx", [False, True])  # W8A8 prefill: torch._int_mm where the CPU has AMX-INT8
def test_int8_linears_equal_the_gemm_over_the_whole_weight(path, monkeypatch, algo, tokens, amx):
    if (
        amx
        and algo != "W8A16"
        and tokens > quantized.dense.MAX_ROWS
        and "avx512f" not in quantized.dense.native.cpu_flags()
    ):
        # oneDNN's AVX2 int8 GEMM (under TRTSERVE_ISA=avx2 or on an AVX2 CPU) got s8 x s8 sums wrong by
        # up to 65558 (torch 2.13): torch._int_mm is taken only where the CPU has AMX-INT8
        pytest.skip("torch._int_mm is wrong below AVX-512 here; the engine uses it only with AMX-INT8")
    monkeypatch.setattr(quantized, "_SLAB_BYTES", 64 * 128 * 4)
    flags = quantized.dense.native.cpu_flags() - {"amx_int8"} | ({"amx_int8"} if amx else set())
    monkeypatch.setattr(quantized.dense.native, "cpu_flags", lambda: flags)
    w, s = torch.randint(-127, 128, (150, 128), dtype=torch.int8), torch.rand(150) / 100
    x = torch.randn(tokens, 128)
    got = make_linear({"weight": w, "weights_scaling_factor": s}, algo, torch.float32)(x)
    if algo == "W8A16":
        ref = F.linear(x, w.float()) * s
    else:
        tok = x.abs().amax(dim=-1, keepdim=True) / 127
        ref = F.linear((x / tok).round().clamp(-127, 127), w.float()) * (tok * s)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("native_bf16", [True, False])
def test_w8a16_bf16_prefill_on_either_kind_of_cpu(path, monkeypatch, native_bf16):
    """bf16 prefill rows: widened slabs in torch's bf16 GEMM where the CPU has bf16 matmul
    instructions, torch's int8 kernel elsewhere; both within bf16 rounding of the float32 result."""
    monkeypatch.setattr(quantized, "_SLAB_BYTES", 64 * 128 * 4)
    flags = {"avx2", "fma", "avx512_bf16"} if native_bf16 else {"avx2", "fma"}
    monkeypatch.setattr(quantized.dense.native, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(quantized.dense, "max_rows", lambda dtype: 2)  # (cached per machine: not with fake flags)
    w, s = torch.randint(-127, 128, (150, 128), dtype=torch.int8), torch.rand(150) / 100
    x = torch.randn(70, 128).bfloat16()
    lin = make_linear({"weight": w, "weights_scaling_factor": s}, "W8A16", torch.bfloat16)
    slabs = []
    monkeypatch.setattr(quantized, "slab_linear", lambda *a, **k: slabs.append(1) or slab_linear(*a, **k))
    got = lin(x)
    assert got.dtype == torch.bfloat16 and bool(slabs) == native_bf16
    ref = F.linear(x.float(), w.float()) * s.bfloat16().float()
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("native_bf16", [True, False])
def test_w4a16_bf16_prefill_on_either_kind_of_cpu(path, monkeypatch, native_bf16):
    """bf16 W4A16 prefill rows: widened slabs (int4 x scale rounded to bf16) in torch's bf16 GEMM where
    the CPU has bf16 matmul instructions, torch's int4 kernel elsewhere; both within bf16 rounding."""
    monkeypatch.setattr(quantized, "_SLAB_BYTES", 64 * 256 * 4)
    flags = {"avx2", "fma", "f16c", "avx512_bf16"} if native_bf16 else {"avx2", "fma", "f16c"}
    monkeypatch.setattr(quantized.dense.native, "cpu_flags", lambda: frozenset(flags))
    q = torch.randint(-8, 8, (128, 256), dtype=torch.int8)
    s = torch.rand(128, 2) / 10
    packed = ((q[0::2].to(torch.uint8) & 15) | ((q[1::2].to(torch.uint8) & 15) << 4)).view(torch.int8)
    lin = make_linear({"weight": packed, "weights_scaling_factor": s}, "W4A16_AWQ", torch.bfloat16)
    x = torch.randn(70, 256).bfloat16()
    slabs = []
    monkeypatch.setattr(quantized, "slab_linear", lambda *a, **k: slabs.append(1) or slab_linear(*a, **k))
    got = lin(x)
    assert got.dtype == torch.bfloat16 and bool(slabs) == (native_bf16 and lin.kernel)
    ref = F.linear(x.float(), q.float() * s.bfloat16().float().repeat_interleave(128, dim=1))
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("tokens", [5, 70])  # the int4 decode kernel; widened slabs
def test_w4a16_float32_widens_the_int4_pack_exactly(path, monkeypatch, tokens):
    monkeypatch.setattr(quantized, "_SLAB_BYTES", 64 * 256 * 4)
    out, k, gs = 192, 256, 64
    q = torch.randint(-8, 8, (out, k), dtype=torch.int8)
    packed = ((q[0::2].to(torch.uint8) & 15) | ((q[1::2].to(torch.uint8) & 15) << 4)).view(torch.int8)
    s = torch.rand(out, k // gs) / 10
    lin = make_linear({"weight": packed, "weights_scaling_factor": s}, "W4A16_AWQ", torch.float32, gs)
    if not lin.kernel:
        pytest.skip("no int4 kernel (or an int4 pack layout it does not know) here")
    ref = q.float() * s.repeat_interleave(gs, dim=1)
    assert same(widened(lin, out, k), ref)
    part = torch.empty(40, k)  # rows 24:64 straddle a block of the pack
    lin.widen_rows(24, 64, part)
    assert same(part, ref[24:64])
    x = torch.randn(tokens, k)
    torch.testing.assert_close(lin(x), F.linear(x, ref), rtol=1e-4, atol=1e-3)
