"""The W4A16 decode kernel (`int4_gemm.c`), built by trtserve/kernels/native.py; torch's own int4
GEMM runs instead where it cannot be built. Its per-unit math is int4.h, which the one-call decode
step (decode_layers.c) shares, so a W4A16 step gives the same bits in one call as op by op.
Decode is bandwidth-bound, and torch's int4 kernel unpacks too slowly to stream at memory speed
(docs/performance.md has the figures).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("int4_gemm.c")
DTYPES = (torch.bfloat16, torch.float32)  # activation (and scale) dtypes the kernel reads
BF16_MAX_ROWS = 16  # beyond this (prefill), torch's AVX2 kernel is as fast for bf16 inputs


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    return native.function(
        SOURCE, "trtserve_int4_gemm", "pillpllpilpii"
    )  # x, x_bf16, M, K, w, N, bn, sz, sz_bf16, gs, y, q8, threads


@cache
def int8_activations_available() -> bool:
    """Whether this machine runs the int8-activation path (int4.h, INT4_Q8): the kernel's AVX-512
    build with VNNI and VBMI, over torch's 64-output pack."""
    probe = native.function(SOURCE, "trtserve_int4_q8", "")
    return load() is not None and probe is not None and probe() == 1 and block_n() == 64


@cache
def block_n() -> int | None:
    """Outputs per block of torch's CPU int4 pack on this machine (32 on AVX2 builds, 64 on
    AVX-512 ones), read off a probe pack; None for a layout the kernel does not know."""
    q = torch.zeros(64, 2, dtype=torch.int32)
    q[16, 0], q[32, 0] = 1, 2
    first = int(torch._convert_weight_to_int4pack_for_cpu(q, 1).view(torch.uint8).flatten()[0])
    return {1 << 4: 32, 2 << 4: 64}.get(first)


BF16_WIDE_ROWS = 2  # the same against torch's AVX-512 kernel, with this kernel's AVX-512 build


# Rows below which the int8-activation path runs ours whatever the dtype (torch's kernel has no such path)
Q8_MAX_ROWS = 64


def preferred(dtype: torch.dtype, rows: int, int8_activations: bool = False) -> bool:
    """Whether this kernel beats torch's on a (rows, K) input. float32: always (torch's kernel runs
    float32 inputs far slower). bfloat16: decode rows on AVX2 builds of torch; against torch's AVX-512
    kernel (64-output blocks) only this kernel's AVX-512 build, up to BF16_WIDE_ROWS rows (the
    crossovers measured are in docs/performance.md). With int8 activations (opt-in): below Q8_MAX_ROWS."""
    if dtype == torch.float32 or (int8_activations and rows < Q8_MAX_ROWS):
        return True
    return rows <= (BF16_MAX_ROWS if block_n() == 32 else BF16_WIDE_ROWS if native.avx512_build() else 0)


def supports(dtype: torch.dtype, out_features: int) -> bool:
    return dtype in DTYPES and load() is not None and block_n() is not None and out_features % block_n() == 0


def int4_gemm(
    x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor, group_size: int, int8_activations: bool = False
) -> torch.Tensor | None:
    """(M, K) x, torch's CPU int4 pack of an (N, K) weight and its (K / group, N, 2) scales and
    zeros (in x's dtype) -> (M, N) in x's dtype; None if the kernel could not run. int8_activations:
    x rounded to int8 per group (int4.h) where int8_activations_available(), else the float path."""
    m, k = x.shape
    n = scales_zeros.shape[1]
    y = torch.empty(m, n, dtype=x.dtype)
    bf16 = int(x.dtype == torch.bfloat16)
    rc = load()(
        x.data_ptr(), bf16, m, k, packed.data_ptr(), n, block_n(), scales_zeros.data_ptr(), bf16, group_size,
        y.data_ptr(), int(int8_activations), torch.get_num_threads(),
    )  # fmt: skip
    return y if rc == 0 else None
