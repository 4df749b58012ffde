"""The dense decode GEMM (`dense_gemv.c`): y = x w^T for a few rows of x, w stored (out, in) in
float32, bfloat16 or float16 (or int8 with per-output scales, for W8A16), built by
trtserve/kernels/native.py. `linear` is F.linear with this
kernel under it for decode-sized batches on CPU, and torch's GEMM for the rest or where the kernel
cannot be built."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("dense_gemv.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.int8: 3}  # int8: weights only
FLOATS = (torch.float32, torch.bfloat16, torch.float16)  # activation dtypes
MAX_ROWS = 64  # the most rows the kernel takes (gemv.h's MAX_M)
WIDE = {"avx512f"}  # on Intel CPUs, torch's (MKL's) GEMM runs AVX-512 code
# Native bf16 matmul without AMX (Zen 4): rows past which torch's oneDNN GEMM overtakes the AVX-512 build's
# bf16 dot tile (vdpbf16ps), or its float32-FMA tile where the compiler lacks AVX512-BF16
BF16_DOT_ROWS, BF16_WIDE_ROWS = 32, 16


@cache
def max_rows(dtype: torch.dtype) -> int:
    """Rows up to which the kernel beats torch (the crossovers measured are in docs/performance.md).
    On AMD CPUs MKL runs its AVX2 code even where AVX-512 is present, so the kernel wins float32 at
    every size it takes; where the CPU has native bf16 matmul, torch's bf16 GEMM overtakes after some
    rows, unless the kernel has AMX too (amx.h). On Intel CPUs with AVX-512, only the kernel's AVX-512
    build keeps up with MKL beyond 8 rows."""
    if dtype == torch.bfloat16 and native_matmul(dtype):
        if native.amx_bf16():
            return MAX_ROWS
        if "amx_bf16" in native.cpu_flags():  # torch's GEMM has AMX, the kernel not (an older compiler)
            return 4
        if native.avx512_bf16():  # gemv.h's bf16 dot tile
            return BF16_DOT_ROWS
        return BF16_WIDE_ROWS if native.avx512_build() else 2
    if native.cpu_flags() & WIDE and native.cpu_vendor() == "GenuineIntel":
        return MAX_ROWS if dtype == torch.float32 and native.avx512_build() else 8
    return MAX_ROWS


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    return native.function(SOURCE, "trtserve_dense_gemm", "pillpilppi")  # x, xdt, M, K, w, wdt, N, scale, y, threads


@cache
def same_bits_rows(dtype: torch.dtype) -> int:
    """Rows up to which the kernel gives a row the same bits in a batch of any size up to this: max_rows,
    but on AMX bf16 GEMMs run as tile multiplies from a few rows (amx.h), which sum in another order."""
    amx = native.function(SOURCE, "trtserve_amx_min_rows", "")
    first = amx() if amx is not None and dtype == torch.bfloat16 else 0
    return min(max_rows(dtype), first - 1) if first else max_rows(dtype)


def usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the kernel takes x @ weight^T: a CPU decode batch of x in weight's dtype, or over int8
    weights (W8A16) in any float dtype, weight contiguous (out, in). Int8: torch's kernel streams
    float32 inputs far below memory speed; for bf16 inputs the two are close, and this one gives the
    bits the one-call decode step (decode_layers.c) gives, so a sequence decodes alike in either."""
    return (
        x.device.type == "cpu"
        and x.dim() == 2
        and weight.dtype in (x.dtype, torch.int8)
        and x.dtype in FLOATS
        and 0 < x.shape[0] <= max_rows(x.dtype)
        and weight.is_contiguous()
        and load() is not None
    )


def gemm(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor | None:
    """(x @ weight^T) * scale in x's dtype for `usable` inputs; scale: float32 (out,) or None.
    None if the kernel could not run."""
    x = x.contiguous()
    (m, k), n = x.shape, weight.shape[0]
    y = torch.empty(m, n, dtype=x.dtype)
    sp = None if scale is None else scale.data_ptr()
    rc = load()(
        x.data_ptr(), DTYPES[x.dtype], m, k, weight.data_ptr(), DTYPES[weight.dtype], n, sp, y.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    return y if rc == 0 else None


UPCAST_ROWS = 64  # from this many rows a float32 GEMM over upcast weights beats an emulated bf16/fp16 one
NATIVE = {torch.bfloat16: {"avx512_bf16", "amx_bf16"}, torch.float16: {"avx512_fp16", "amx_fp16"}}
# int8 x int8 -> int32 (torch._int_mm) is fast only with AMX-INT8; elsewhere far below float32's GEMM.
NATIVE[torch.int8] = {"amx_int8"}


def native_matmul(dtype: torch.dtype) -> bool:
    """Whether this CPU has matmul instructions for bf16 / fp16 / int8 `dtype` (torch's GEMM emulates
    bf16 / fp16 otherwise, and its int8 GEMM is slow)."""
    return dtype in NATIVE and bool(native.cpu_flags() & NATIVE[dtype])


def upcast(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether to run x @ weight^T in float32: a bf16/fp16 prefill-sized batch on a CPU without that
    dtype's matmul instructions, where torch's GEMM emulates it slowly and converting the weight to
    float32 wins from UPCAST_ROWS rows. Outputs are the same up to float32 summation order."""
    return (
        x.device.type == "cpu"
        and x.dtype in NATIVE
        and weight.dtype == x.dtype
        and x.shape[0] >= UPCAST_ROWS
        and not native_matmul(x.dtype)
    )


@cache
def onednn_float32() -> bool:
    """Whether float32 GEMMs past the kernel's rows run on oneDNN rather than MKL (torch's `linear`): on AMD
    CPUs with AVX-512, where MKL runs its AVX2 code and oneDNN its AVX-512 code (docs/performance.md)."""
    return (
        native.avx512_build()
        and native.cpu_vendor() == "AuthenticAMD"
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for 2-D x; weight (out, in)."""
    if upcast(x, weight):
        y = F.linear(x.float(), weight.float()).to(x.dtype)
    else:
        y = gemm(x, weight) if usable(x, weight) else None
    if y is None:
        if x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu" and onednn_float32():
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return F.linear(x, weight, bias)
    return y if bias is None else y.add_(bias)
