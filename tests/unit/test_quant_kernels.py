"""The torch engine's quantized linears against a plain float GEMM on the weights they decode,
and the calibration windows: seeded, the asked-for count and length."""

from __future__ import annotations

import pytest
import torch

from trtserve.kernels import widen
from trtserve.models.quantized import make_linear, unpack_int4_rows
from trtserve.quant.calibration import calibration_batches, read_text_file, stdlib_text

OUT, IN = 64, 256


def _pack_rows(q: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7], (out, in) -> (out/2, in) bytes, row 2i in the low nibble."""
    lo, hi = q[0::2].to(torch.uint8) & 15, q[1::2].to(torch.uint8) & 15
    return (lo | (hi << 4)).view(torch.int8)


def test_int4_unpack_roundtrip():
    q = torch.randint(-8, 8, (OUT, IN), dtype=torch.int8)
    assert torch.equal(unpack_int4_rows(_pack_rows(q)), q)


def test_fp4_unpack():
    codes = torch.tensor([[0x21, 0xF7]], dtype=torch.uint8)  # low nibble first: 1, 2, 7, 15
    out = torch.empty(1, 4)
    widen.widen_nibbles(codes, widen.INPUTS_PACKED, widen.E2M1, torch.ones(1, 1), None, torch.float32, out)
    assert out.tolist() == [[0.5, 1.0, 6.0, -6.0]]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_w8a16(dtype):
    w = torch.randint(-127, 128, (OUT, IN), dtype=torch.int8)
    s = torch.rand(OUT) / 100
    x = torch.randn(5, IN, dtype=dtype)
    got = make_linear({"weight": w, "weights_scaling_factor": s}, "W8A16", dtype)(x)
    ref = x.float() @ (w.float() * s[:, None]).T
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("out", [96, 3000])  # one slab, and several slabs with a ragged last one
def test_w8a16_float32_prefill_widens_the_weight_and_matches_the_int8_kernel(out):
    """float32 prefill rows take the widened-weight GEMM (torch's int8 kernel runs float32 at
    1-2 GFLOP/s); it must agree with that kernel, which stays the reference."""
    k = 512
    w = torch.randint(-127, 128, (out, k), dtype=torch.int8)
    s = torch.rand(out) / 100
    x = torch.randn(40, k)
    got = make_linear({"weight": w, "weights_scaling_factor": s}, "W8A16", torch.float32)(x)
    ref = torch._weight_int8pack_mm(x, w, s)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_w8a16_weight_at_an_unaligned_offset_at_prefill_size():
    """safetensors hands out tensors at any offset of its buffer; torch's AVX-512 int8 kernel
    crashed (SIGSEGV) on such a weight at 128 rows."""
    n, k = 2560, 2048
    buf = torch.randint(-127, 128, (n * k + 24,), dtype=torch.int8)
    w = buf[24:].view(n, k)  # 24 bytes past an aligned allocation
    s = torch.rand(n) / 100
    x = torch.randn(128, k, dtype=torch.bfloat16)
    got = make_linear({"weight": w, "weights_scaling_factor": s}, "W8A16", torch.bfloat16)(x)
    ref = x.float() @ (w.float() * s.bfloat16().float()[:, None]).T
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=0.5)


@pytest.mark.parametrize("algo", ["W4A16_AWQ", "W4A8_AWQ"])
def test_int4_groupwise(algo):
    q = torch.randint(-8, 8, (OUT, IN), dtype=torch.int8)
    s = torch.rand(OUT, IN // 128) / 10
    pqs = torch.rand(IN) + 0.5
    t = {"weight": _pack_rows(q), "weights_scaling_factor": s, "prequant_scaling_factor": pqs}
    x = torch.randn(3, IN)
    w = q.float() * s.repeat_interleave(128, dim=1)
    xin = x * pqs
    if algo == "W4A8_AWQ":
        act, s2 = torch.tensor([0.01]), torch.tensor([0.002])
        t |= {"activation_scaling_factor": act, "weights_scaling_factor_2": s2}
        xin = (xin / act).clamp(-448, 448).to(torch.float8_e4m3fn).float() * act
        w = (w / s2).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s2
    got = make_linear(t, algo, torch.float32)(x)
    torch.testing.assert_close(got, xin @ w.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows", [3, 128])
def test_int4_groupwise_bfloat16(rows):
    """bf16 decode rows (int4 kernels) and prefill rows (where bf16 matmul is native: widened slabs,
    int4 x scale rounded to bf16, in torch's bf16 GEMM; else torch's int4 GEMM) both give the product
    with the dequantized weights, to bf16 precision."""
    q = torch.randint(-8, 8, (OUT, IN), dtype=torch.int8)
    s = torch.rand(OUT, IN // 128) / 10
    x = torch.randn(rows, IN).bfloat16()
    got = make_linear({"weight": _pack_rows(q), "weights_scaling_factor": s}, "W4A16_AWQ", torch.bfloat16)(x)
    w = q.float() * s.bfloat16().float().repeat_interleave(128, dim=1)  # the engine keeps bf16 scales
    assert got.dtype == torch.bfloat16 and got.shape == (rows, OUT)
    torch.testing.assert_close(got.float(), x.float() @ w.T, rtol=2e-2, atol=5e-2)


def test_w8a8_smoothquant_quantizes_each_token_on_its_own_grid():
    w = torch.randint(-127, 128, (OUT, IN), dtype=torch.int8)
    ws = torch.rand(OUT) / 100
    xq = torch.randint(-127, 128, (4, IN))
    xq[:, 0] = torch.tensor([127, -127, 127, -127])  # each token's amax is 127 steps of its own scale
    tok = torch.tensor([[0.02], [1.5], [3e-4], [7.0]])  # scales 4 orders of magnitude apart
    x = xq.float() * tok  # on each token's int8 grid: per-token quantization is lossless
    # The calibrated per-tensor scale is ignored: it would flush the third token to zero.
    t = {"weight": w, "weights_scaling_factor": ws, "activation_scaling_factor": torch.tensor([0.05])}
    got = make_linear(t, "W8A8_SQ_PER_CHANNEL", torch.float32)(x)
    torch.testing.assert_close(got, (xq.float() @ w.float().T) * tok * ws, rtol=1e-5, atol=1e-6)


def test_fp8_per_channel_per_token():
    w = (torch.randn(OUT, IN) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    pcs = torch.rand(OUT) / 100
    x = torch.randn(3, IN)
    got = make_linear({"weight": w, "per_channel_scale": pcs}, "FP8_PER_CHANNEL_PER_TOKEN", torch.float32)(x)
    ref = x @ (w.float() * pcs[:, None]).T
    assert torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), dim=0) > 0.999  # x rounded to fp8


def test_calibration_is_seeded_and_sized(tmp_path):
    from helpers import (
        _tokenizer_files,  # noqa: F401  (the tests' tiny tokenizer)
        write_tokenizer,
    )
    from transformers import AutoTokenizer

    write_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(stdlib_text()) > 100_000
    a = calibration_batches(tok, None, 5, 24)
    b = calibration_batches(tok, None, 5, 24)
    assert len(a) == 5 and all(t.shape == (1, 24) for t in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "alpha beta"}\n\n"gamma"\n')
    assert read_text_file(jsonl) == "alpha beta\n\ngamma"
