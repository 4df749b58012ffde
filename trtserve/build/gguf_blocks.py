"""GGUF quantized blocks re-encoded for the torch engine's packed formats, without a float detour
where one is exact (layouts: gguf-py's gguf/quants.py, llama.cpp's ggml-quants.c).

Q4_0, Q4_1 and Q4_K hold 4-bit values q in [0, 15] with a scale and a min per 32 inputs, so each
weight is exactly the int4 GEMM's (q - 8) * scale + zero (W4A16 with zero points, groups of 32):

    Q4_0  w = d (q - 8)              scale = d          zero = 0
    Q4_1  w = d q + m                scale = d          zero = m + 8 d
    Q4_K  w = d sc q - dmin mn       scale = d sc       zero = 8 d sc - dmin mn   (6-bit sc, mn per 32)

Types of 5 to 8 bits (Q8_0, Q5_0, Q5_1, Q5_K, Q6_K) have no exact int4 form and our int8 path
scales per output row, so they are dequantized and rounded to int8 per row (W8A16); the error this
adds is measured in docs/quantization.md. F32 / F16 / BF16 tensors stay dense. MXFP4 (gpt-oss's experts)
has no packed form here: it is dequantized exactly to bfloat16 by the safetensors path's own function.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from trtserve.build.stored import BLOCK_BYTES, dequantize_mxfp4

T = GGMLQuantizationType
INT4_TYPES = frozenset({T.Q4_0, T.Q4_1, T.Q4_K})  # exact as int4 x scale + zero, groups of 32
INT8_TYPES = frozenset({T.Q8_0, T.Q5_0, T.Q5_1, T.Q5_K, T.Q6_K})  # rounded to int8 per output row
DENSE_TYPES = frozenset({T.F32, T.F16, T.BF16})
KEPT_TYPES = INT4_TYPES | INT8_TYPES | DENSE_TYPES
GROUP = 32  # inputs per int4 scale and zero of every INT4_TYPES format


@dataclass(frozen=True)
class Int4Rows:
    """w[o, k] = (q[o, k] - 8) * scale[o, k // 32] + zero[o, k // 32]."""

    q: torch.Tensor  # (out, in) uint8 in [0, 15]
    scale: torch.Tensor  # (out, in / 32) float32
    zero: torch.Tensor  # (out, in / 32) float32

    def dequantize(self) -> torch.Tensor:
        w = (self.q.float() - 8).unflatten(1, (-1, GROUP)) * self.scale[..., None] + self.zero[..., None]
        return w.flatten(1)  # (out, in) float32


@dataclass(frozen=True)
class Int8Rows:
    """w[o, k] ~ q[o, k] * scale[o] (symmetric int8 per output row)."""

    q: torch.Tensor  # (..., out, in) int8 in [-127, 127]
    scale: torch.Tensor  # (..., out) float32

    @classmethod
    def round(cls, w: torch.Tensor) -> Int8Rows:
        """(..., out, in) float32 rounded to int8 with each row's amax / 127 as its scale."""
        scale = w.abs().amax(dim=-1).clamp_min(torch.finfo(torch.float32).tiny) / 127
        return cls(torch.round(w / scale[..., None]).clamp(-127, 127).to(torch.int8), scale)


def _f16(b: np.ndarray) -> np.ndarray:
    """(blocks, 2) bytes -> (blocks, 1) float32 of their little-endian fp16."""
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray, chunk: int) -> np.ndarray:
    """(blocks, n) bytes -> (blocks, 2 n) values: per `chunk` bytes, their low nibbles then their high ones."""
    b = qs.reshape(qs.shape[0], -1, 1, chunk) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (b & np.uint8(0x0F)).reshape(qs.shape[0], -1)


def _q4_k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 scale bytes per super-block -> its eight 6-bit (scale, min) pairs, (blocks, 8) each."""
    d, m, m_d = np.split(scales.reshape(-1, 3, 4), 3, axis=-2)
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.reshape(-1, 8).astype(np.float32), mn.reshape(-1, 8).astype(np.float32)


def _groups(blocks: np.ndarray, kind: T) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(blocks, bytes) of one INT4_TYPES type -> q (groups, 32) uint8, scale and zero (groups,) float32."""
    if kind == T.Q4_K:
        d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
        sc, mn = _q4_k_scales(blocks[:, 4:16])
        scale, low = d * sc, dmin * mn  # (blocks, 8): exact float32 products (11 x 6 bits)
        return _nibbles(blocks[:, 16:], 32), scale.reshape(-1), (8 * scale - low).reshape(-1)
    d = _f16(blocks[:, 0:2])
    if kind == T.Q4_0:
        return _nibbles(blocks[:, 2:], 16), d.reshape(-1), np.zeros(d.shape[0], dtype=np.float32)
    m = _f16(blocks[:, 2:4])
    return _nibbles(blocks[:, 4:], 16), d.reshape(-1), (m + 8 * d).reshape(-1)


def int4_rows(data: np.ndarray, kind: T, shape: tuple[int, int]) -> Int4Rows:
    """A GGUF tensor's stored bytes (rows, row_bytes) of an INT4_TYPES type as Int4Rows of `shape`."""
    if kind not in INT4_TYPES:
        raise ValueError(f"{kind.name} has no exact int4 form")
    out, n = shape
    block_values, block_bytes = GGML_QUANT_SIZES[kind]
    q, scale, zero = _groups(data.reshape(-1, block_bytes), kind)
    assert q.size == out * n and block_values % GROUP == 0, (q.shape, shape)
    as_rows = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=a.dtype)).reshape(out, -1)  # noqa: E731
    return Int4Rows(as_rows(q), as_rows(scale), as_rows(zero))


def mxfp4_values(data: np.ndarray, shape: tuple[int, ...]) -> torch.Tensor:
    """A GGUF MXFP4 tensor's stored bytes as `shape` bfloat16, exactly. ggml's block_mxfp4 is an E8M0 exponent
    byte then 16 bytes whose low nibbles hold values 0-15 and high nibbles 16-31; HF's blocks hold value 2j in
    byte j's low nibble and 2j + 1 in its high one, so the codes are re-packed for stored.dequantize_mxfp4."""
    *lead, n = shape
    blocks = data.reshape(-1, GGML_QUANT_SIZES[T.MXFP4][1])  # (blocks, 17)
    codes = _nibbles(blocks[:, 1:], BLOCK_BYTES)  # (blocks, 32): each value's E2M1 code, in order
    packed = codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))  # (blocks, 16) in HF's nibble order
    as_torch = lambda a, *dims: torch.from_numpy(np.ascontiguousarray(a)).reshape(*lead, n // 32, *dims)  # noqa: E731
    return dequantize_mxfp4(as_torch(packed, BLOCK_BYTES), as_torch(blocks[:, 0]))


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(..., out, in) values in [0, 15] -> the engine's packed int4 (..., out / 2, in) int8: two's-complement
    q - 8, row 2i in the low nibble and row 2i + 1 in the high one (models/quantized.py unpacks it)."""
    s = (q.to(torch.int16) - 8) & 0x0F  # (..., out, in) two's-complement nibbles
    return (s[..., 0::2, :] | (s[..., 1::2, :] << 4)).to(torch.uint8).view(torch.int8)
