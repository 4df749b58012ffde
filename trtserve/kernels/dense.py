"""The dense decode GEMM (`dense_gemv.c`): y = x w^T for a few rows of x, w stored (out, in) in
float32, bfloat16 or float16, built by trtserve/kernels/native.py. `linear` is F.linear with this
kernel under it for decode-sized batches on CPU, and torch's GEMM for the rest or where the kernel
cannot be built."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("dense_gemv.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
MAX_ROWS = 8  # the most rows the kernel takes; above this torch's blocked GEMM reuses weights better


@cache
def max_rows(dtype: torch.dtype) -> int:
    """Rows up to which the kernel beats torch, measured on 2 threads over TinyLlama-1.1B's 22
    layers (3.9 GB float32, read from DRAM): float32 and float16 up to 8 rows (f32: 31 vs 31 GB/s at
    one row, 26 vs 16 GB/s at four; f16: 24 vs 15 GB/s at one). bfloat16 only up to 2 rows where
    the CPU has native bf16 (AVX512-BF16 / AMX, torch's GEMM then streams 23 GB/s at every batch size)."""
    if dtype == torch.bfloat16 and native.cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        return 2
    return MAX_ROWS


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    lib = native.library(SOURCE)
    if lib is None:
        return None
    fn = lib.trtserve_dense_gemm
    i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    fn.argtypes = [ptr, i64, i64, ptr, i64, i32, ptr, i32]
    fn.restype = i32
    return fn


def usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear(x, weight)` runs the kernel: a CPU decode batch of x in weight's dtype."""
    return (
        x.device.type == "cpu"
        and x.dim() == 2
        and x.dtype == weight.dtype
        and x.dtype in DTYPES
        and 0 < x.shape[0] <= max_rows(x.dtype)
        and weight.is_contiguous()
        and load() is not None
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for 2-D x; weight (out, in)."""
    if not usable(x, weight):
        return F.linear(x, weight, bias)
    x = x.contiguous()
    (m, k), n = x.shape, weight.shape[0]
    y = torch.empty(m, n, dtype=x.dtype)
    rc = load()(x.data_ptr(), m, k, weight.data_ptr(), n, DTYPES[x.dtype], y.data_ptr(), torch.get_num_threads())
    if rc != 0:
        return F.linear(x, weight, bias)
    return y if bias is None else y.add_(bias)
