"""Widening of e4m3 and 4-bit weights to float32 or bfloat16 (`widen.c`), a slab of rows at a time,
for the quantized linears' GEMM (trtserve/models/quantized.py), and the e4m3 and int8 rounding of
activations.
Built by trtserve/kernels/native.py; where it cannot be, each function runs the same formula in
torch ops, which give the same values (the tests compare the two bit for bit).

Why: torch converts e4m3 to float32 with scalar code, and unpacking, scaling and rounding a 4-bit
weight took several separate torch ops (each a parallel region), costing a large share of the GEMM
they feed (docs/performance.md).
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path

import torch

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("widen.c")
# each C function's arguments, by native.function's letters
ARGS = {
    "trtserve_fp8_round": "pllpplillpi",
    "trtserve_widen_bytes": "pllplpi",
    "trtserve_widen_nibbles": "plllppppflpiipi",
    "trtserve_int8_round": "pllppi",
    "trtserve_scale_outer": "plllpplpi",
    "trtserve_widen_int4pack": "plllllplllpi",
}
FP8_MAX = 448.0

_BYTES = torch.arange(256, dtype=torch.uint8)
E4M3 = _BYTES.view(torch.float8_e4m3fn).float()  # e4m3 byte -> value
INT4 = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1.0])  # nibble -> two's complement
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])  # nibble -> value
ROWS_PACKED, INPUTS_PACKED = 0, 1  # nibble layouts: int4 (out / 2, in), row 2i low; E2M1 (out, in / 2), input 2j low


@cache
def _fn(name: str):
    return native.function(SOURCE, name, ARGS[name])


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def available() -> bool:
    return _fn("trtserve_widen_bytes") is not None


def fp8_round(
    x: torch.Tensor,
    mult: torch.Tensor | None,
    inv: torch.Tensor | None,
    dtype: torch.dtype,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """e4m3(clamp(x * mult, +-448)) * inv rounded to `dtype`, in out_dtype (float32, or `dtype` where
    that is bfloat16): x (rows, k); mult and inv float32 of one element, or one per row ((rows, 1));
    None: per token, mult = 448 / amax of the row (as 448 / ((max(amax, 2^-24) / 448) * 448)),
    inv = 1 / mult."""
    fn = _fn("trtserve_fp8_round")
    if fn is None or x.device.type != "cpu" or x.dim() != 2 or dtype not in (torch.float32, torch.bfloat16):
        if mult is None:
            scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(2**-24) / FP8_MAX
            mult = FP8_MAX / (scale * FP8_MAX)
            inv = 1 / mult
        q = (x.float() * mult).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return (q.float() * inv).to(dtype).to(out_dtype)
    assert out_dtype in (torch.float32, dtype)
    x = (x if x.dtype == torch.bfloat16 else x.float()).contiguous()
    y = torch.empty(x.shape, dtype=out_dtype)
    if mult is not None:
        mult, inv = mult.float().contiguous(), inv.float().contiguous()
    per_row = int(mult is not None and mult.numel() > 1)
    fn(
        x.data_ptr(), x.shape[0], x.shape[1], _ptr(mult), _ptr(inv), per_row, int(dtype == torch.bfloat16),
        int(x.dtype == torch.bfloat16), int(out_dtype == torch.bfloat16), y.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return y


def int8_round(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token int8 rounding of x (rows, k): (q, scale), scale (rows, 1) = max(amax, 1e-8) / 127
    of each row, q = clamp(round(x / scale), +-127) in float32."""
    xf = x.float()
    fn = _fn("trtserve_int8_round")
    if fn is None or x.device.type != "cpu" or x.dim() != 2:
        scale = xf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-8) / 127  # (rows, 1)
        return (xf / scale).round_().clamp_(-127, 127), scale
    xf = xf.contiguous()
    q, scale = torch.empty_like(xf), torch.empty(xf.shape[0], 1)
    fn(xf.data_ptr(), xf.shape[0], xf.shape[1], q.data_ptr(), scale.data_ptr(), torch.get_num_threads())
    return q, scale


def scale_outer(
    y: torch.Tensor, row: torch.Tensor | None, col: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(y * (row * col)).to(dtype) for y (rows, n) of float32, int32 sums (converted to float32
    first) or bf16, row (rows, 1) or None (y * col: a per-channel scale, col holding values of y's
    dtype), col (n,): in place where y's dtype is `dtype` and the kernel runs."""
    fn = _fn("trtserve_scale_outer")
    in_types = {torch.float32: 0, torch.int32: 1, torch.bfloat16: 2}
    ok = y.dtype in in_types and dtype in (torch.float32, torch.bfloat16)
    if fn is None or y.device.type != "cpu" or not y.is_contiguous() or not ok:
        if row is None:
            return y.mul_(col.to(y.dtype)) if y.dtype == dtype else (y * col.to(y.dtype)).to(dtype)
        return (y.float() * (row * col)).to(dtype)
    row = None if row is None else row.float().contiguous()
    col = col.float().contiguous()
    out = y if y.dtype == dtype else torch.empty(y.shape, dtype=dtype)
    fn(
        y.data_ptr(), in_types[y.dtype], y.shape[0], y.shape[1], _ptr(row), col.data_ptr(),
        int(dtype == torch.bfloat16), out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return out


@lru_cache(maxsize=1024)  # by the table's identity: the linears keep theirs (1 KB each)
def _lut_words(lut: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """256 float32 values of `dtype` as the kernel's 32-bit words: their bits, or their bfloat16 bits."""
    if dtype == torch.bfloat16:
        return lut.to(dtype).view(torch.int16).int().contiguous()
    return lut.contiguous().view(torch.int32)


def widen_bytes(w: torch.Tensor, lut: torch.Tensor | None, out: torch.Tensor) -> None:
    """out (rows, k) float32 or bfloat16 = lut[w] for w (rows, k) of bytes (e4m3, ...), lut 256 float32
    values (of out's dtype: exact there); lut None: e4m3 values."""
    fn = _fn("trtserve_widen_bytes")
    if fn is None or w.device.type != "cpu" or out.dtype not in (torch.float32, torch.bfloat16):
        out.copy_(w if lut is None else lut.to(w.device)[w.view(torch.uint8).long()])
    else:
        assert w.is_contiguous() and out.is_contiguous() and out.shape == w.shape and w.element_size() == 1
        words = _lut_words(E4M3 if lut is None else lut, out.dtype)
        fn(
            w.data_ptr(), w.shape[0], w.shape[1], words.data_ptr(), out.element_size(), out.data_ptr(),
            torch.get_num_threads(),
        )  # fmt: skip


def widen_nibbles(
    w: torch.Tensor,
    layout: int,
    codebook: torch.Tensor,
    scales: torch.Tensor | tuple[torch.Tensor, torch.Tensor, float],
    fq: tuple[torch.Tensor, torch.Tensor] | None,
    dtype: torch.dtype,
    out: torch.Tensor,
) -> None:
    """out (rows, k) = codebook[code] * scale, for 4-bit codes w in `layout` (ROWS_PACKED:
    (rows / 2, k); INPUTS_PACKED: (rows, k / 2)) and one scale per (row, group of inputs); then,
    where fq = (mult, inv) is given, fp8_round with those, and rounded to `dtype`; out float32, or
    bfloat16 where `dtype` is. scales: float32
    (rows, groups), or (codes, lut, mul): byte codes (rows, groups) whose scale is lut[code] * mul."""
    rows, k = out.shape
    s = scales if isinstance(scales, torch.Tensor) else None
    groups = (s if s is not None else scales[0]).shape[1]
    fn = _fn("trtserve_widen_nibbles")
    assert out.dtype in (torch.float32, dtype)
    if fn is None or w.device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        if s is None:
            s = scales[1].to(w.device)[scales[0].view(torch.uint8).long()] * scales[2]
        table = codebook.to(w.device) * s[..., None]  # (rows, groups, 16): every code's value in each group
        if fq is not None:
            table = fp8_round(table.view(-1, 16), *fq, torch.float32).view(table.shape)
        table = table.to(dtype).float()
        out.copy_(table.gather(-1, _codes(w, layout, rows, k).view(rows, groups, -1)).view(rows, k))
        return
    assert w.is_contiguous() and out.is_contiguous()
    fq_t = None if fq is None else torch.cat([fq[0].float().flatten(), fq[1].float().flatten()])
    if s is not None:
        s = s.float().contiguous()
        codes, lut, mul = None, None, 0.0
    else:
        codes, lut, mul = scales[0].contiguous(), scales[1].float().contiguous(), float(scales[2])
    fn(
        w.data_ptr(), layout, rows, k, codebook.data_ptr(), _ptr(s), _ptr(codes), _ptr(lut), mul, k // groups,
        _ptr(fq_t), int(dtype == torch.bfloat16), int(out.dtype == torch.bfloat16), out.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip


def _codes(w: torch.Tensor, layout: int, rows: int, k: int) -> torch.Tensor:
    """The (rows, k) int64 nibbles of packed w."""
    p = w.view(torch.uint8)
    lo, hi = p & 15, p >> 4
    dim = 1 if layout == ROWS_PACKED else -1
    return torch.stack([lo, hi], dim=dim).reshape(rows, k).long()


def widen_int4pack(
    packed: torch.Tensor, n: int, bn: int, a: int, scales: torch.Tensor, gs: int, out: torch.Tensor
) -> None:
    """out (rows, k) = rows a : a + rows of (q - 8) * scale, from torch's CPU int4 pack of an (n, k)
    weight in blocks of bn outputs (trtserve/kernels/int4_gemm.c) and its float32 scales (k / gs, n)
    (zeros 0); out float32, or bfloat16 (the values rounded to it). The kernel writes a k-major out
    (out.t() contiguous, or a column slice of one: slab_linear's `k_major` slabs) directly; any other
    through a k-major copy."""
    rows, k = out.shape
    fn = _fn("trtserve_widen_int4pack")
    if fn is None or packed.device.type != "cpu" or out.dtype not in (torch.float32, torch.bfloat16):
        p = packed.view(torch.uint8).view(n // bn, k, bn // 2)
        q = torch.cat([p & 15, p >> 4], dim=-1).permute(0, 2, 1).reshape(n, k)[a : a + rows]  # (rows, k)
        s = scales[:, a : a + rows].t().repeat_interleave(gs, dim=1)  # (rows, k)
        out.copy_((q.float() - 8) * s)
        return
    assert scales.dtype == torch.float32 and scales.is_contiguous()
    if out.stride(0) != 1 or out.stride(1) < rows:
        kmajor = torch.empty(k, rows, dtype=out.dtype)
        widen_int4pack(packed, n, bn, a, scales, gs, kmajor.t())
        out.copy_(kmajor.t())
        return
    fn(
        packed.data_ptr(), n, k, bn, a, rows, scales.data_ptr(), gs, out.stride(1), int(out.dtype == torch.bfloat16),
        out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
