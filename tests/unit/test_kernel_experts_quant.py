"""The expert kernel (kernels/experts.c) on the experts it used to leave to the torch path: W8A16 and W4A16
experts (models/quantized.py's linears, read in place) and gpt-oss's (biased router and experts, top-k
softmax, clamped SwiGLU). Each is taken by the kernel (the torch path would raise), reads only the experts
its rows use, and equals the torch path: float32 within the last bits of the exponentials (the torch path's
softmax, SiLU and sigmoid use torch's exp, the kernel expf / exp8, each within 1 ulp), bfloat16 bit for bit
where each expert's rows are few enough that its per-op linear runs our int8 / int4 kernel (same math).
Larger bf16 batches are checked against the kernel's own single rows, not torch's: on tied bf16 router logits
torch.topk's order is its partial sort's, not the lower expert first as the kernel picks."""

from __future__ import annotations

import pytest
import torch

from trtserve.build.weight_only import int4_groups, int8_rows
from trtserve.kernels import dense
from trtserve.kernels import experts as kernel
from trtserve.models.moe import Experts
from trtserve.models.quantized import Int4Groupwise, Int8WeightOnly

needs_kernel = pytest.mark.skipif(kernel.load() is None, reason="no C kernels on this machine (TRTSERVE_ISA=scalar)")
E, K, H, W, S = 8, 2, 128, 128, 128  # widths a multiple of the int4 group (128)
ROWS = (1, 2, 5, 40)  # a decode row (6 of 8 experts idle), a few, a prompt (every expert)
FORMATS = {"plain": None, "w8a16": (int8_rows, Int8WeightOnly), "w4a16": (int4_groups, Int4Groupwise)}


def _linear(w: torch.Tensor, fmt: str, dtype: torch.dtype):
    """w (out, in) float32 as the format holds it: a tensor in dtype, or a quantized linear."""
    if fmt == "plain":
        return w.to(dtype)
    rounding, cls = FORMATS[fmt]
    return cls(rounding(w, 128), dtype)


def _experts(fmt: str, dtype: torch.dtype, family: str, seed: int = 0) -> Experts:
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.1):
        return torch.randn(*shape, generator=g) * scale

    fc_gate, proj = rand(E, 2 * W, H), rand(E, H, W)
    if fmt == "plain":
        experts = dict(fc_gate=fc_gate.to(dtype), proj=proj.to(dtype))
    else:
        experts = dict(fc_gate=[_linear(w, fmt, dtype) for w in fc_gate], proj=[_linear(w, fmt, dtype) for w in proj])
    extra = {}
    if family == "shared":  # Qwen2-MoE: renormalized, a shared expert under a sigmoid gate
        extra = dict(
            shared_fc_gate=_linear(rand(2 * S, H), fmt, dtype), shared_proj=_linear(rand(H, S), fmt, dtype),
            shared_gate=rand(1, H).to(dtype),
        )  # fmt: skip
    elif family == "gpt_oss":  # biases, top-k softmax, a SwiGLU limit the activations reach
        extra = dict(
            router_bias=rand(E, scale=1.0).to(dtype), fc_gate_bias=rand(E, 2 * W, scale=0.3).to(dtype),
            proj_bias=rand(E, H, scale=0.3).to(dtype), swiglu=(1.702, 0.3),
        )  # fmt: skip
    return Experts(rand(E, H, scale=1.0).to(dtype), **experts, top_k=K, renormalize=family != "olmoe", **extra)


def _mm(x: torch.Tensor, w) -> torch.Tensor:
    """The decoder's per-op linear: our dense kernel at decode sizes for tensors, a quantized linear's own."""
    return dense.linear(x, w) if isinstance(w, torch.Tensor) else w(x)


def _no_torch_path(self, x, linear):
    raise AssertionError("the torch path ran")


CASES = [(f, fam) for f in FORMATS for fam in ("shared", "gpt_oss", "olmoe")]


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("fmt", "family"), CASES, ids=[f"{f}-{fam}" for f, fam in CASES])
def test_the_kernel_runs_them_and_equals_the_torch_path(monkeypatch, fmt, family, dtype):
    experts = _experts(fmt, dtype, family)
    assert experts.packed is not None
    want_wdt = {"plain": kernel.DTYPES[dtype], "w8a16": kernel.INT8, "w4a16": kernel.INT4}[fmt]
    assert experts.packed.struct.wdt == want_wdt and experts.packed.struct.top_softmax == (family == "gpt_oss")
    torch.manual_seed(1)
    for rows in ROWS:
        x = torch.randn(rows, H).to(dtype)
        want = experts.grouped(x, _mm)
        used = experts.route(x, _mm)[1].unique().numel()
        before = experts.reads.read
        with monkeypatch.context() as m:
            m.setattr(Experts, "grouped", _no_torch_path)
            got = experts(x, _mm)
        assert experts.reads.read - before == used  # the experts its rows use, each read once
        if rows == 1:
            assert used == K < E  # the idle ones never read
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        elif rows <= 2:  # every per-op linear (router, experts) runs our dense / int4 kernel here: same bits
            assert torch.equal(got, want), (got.float() - want.float()).abs().max()
        elif fmt != "w4a16":  # torch's bf16 GEMMs take more rows: each row equals its own decode step instead
            assert all(torch.equal(got[r], experts(x[r : r + 1], _mm)[0]) for r in range(rows))
        else:  # int4.h pairs rows (as its per-op linear does): a batched row is its decode step's up to rounding
            alone = torch.cat([kernel.run(experts.packed, x[r : r + 1])[0] for r in range(rows)])
            torch.testing.assert_close(got.float(), alone.float(), rtol=0.02, atol=0.03)


@needs_kernel
def test_a_batch_row_equals_the_row_alone():
    """Rows never change each other's output (W8A16, gpt-oss's experts): the batched step's rows equal
    single-row calls bit for bit."""
    experts = _experts("w8a16", torch.bfloat16, "gpt_oss", seed=3)
    x = torch.randn(9, H).bfloat16()
    batched = kernel.run(experts.packed, x)[0]
    for r in range(len(x)):
        assert torch.equal(batched[r : r + 1], kernel.run(experts.packed, x[r : r + 1])[0])


def test_what_the_kernel_cannot_read_takes_the_torch_path():
    q = _experts("w4a16", torch.float32, "olmoe")
    q.fc_gate[3].pre_quant = torch.ones(H)  # an AWQ scale not folded into the norm
    assert kernel.pack(q.router, q.fc_gate, q.proj, K, True) is None
    mixed = _experts("w8a16", torch.float32, "olmoe")
    mixed.proj[0] = _linear(torch.randn(H, W), "w4a16", torch.float32)  # one expert in another format
    assert kernel.pack(mixed.router, mixed.fc_gate, mixed.proj, K, True) is None
    f16 = _experts("plain", torch.float32, "olmoe")
    assert kernel.pack(f16.router.half(), f16.fc_gate, f16.proj, K, True) is None  # router and experts differ
