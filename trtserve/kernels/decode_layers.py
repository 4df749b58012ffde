"""Every decoder layer of a decode step in one call (`decode_layers.c`), built by
trtserve/kernels/native.py: for a few sequences with one new token each, over plain weights in
the model dtype and an unquantized paged KV cache. The decoder runs its per-op path where
`pack` or `run` says no."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("decode_layers.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
FIELDS = ("input_norm", "qkv", "qkv_bias", "dense", "post_norm", "fc_gate", "fc_gate_bias", "proj", "proj_bias")


class _Layer(ctypes.Structure):
    _fields_ = [(f, ctypes.c_void_p) for f in FIELDS]  # layer_t in decode_layers.c


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    # layers, n_layers, dt, h, kv, M, H, n_h, n_kv, hd, I, n_slots, eps, scale, cos, sin, pos, slots, tables,
    # n_blk, bs, threads
    return native.function(SOURCE, "trtserve_decode_layers", "plipplllllllffppppplli")


def pack(layers: list, dtype: torch.dtype) -> ctypes.Array | None:
    """The layers' weight pointers for `run` (the tensors must outlive it), or None unless every
    weight is a contiguous CPU tensor in `dtype` (quantized linears take the per-op path)."""
    if dtype not in DTYPES:
        return None
    table = (_Layer * len(layers))()
    for row, layer in zip(table, layers, strict=True):
        for f in FIELDS:
            t = getattr(layer, f)
            if t is None and f.endswith("_bias"):
                continue
            if not (isinstance(t, torch.Tensor) and t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()):
                return None
            setattr(row, f, t.data_ptr())
    return table


def run(
    table: ctypes.Array,
    h: torch.Tensor,  # (M, H) residual stream in the model dtype, updated in place
    kv_data: torch.Tensor,  # (layers, 2, slots, n_kv, hd)
    n_heads: int,
    intermediate: int,
    eps: float,
    scale: float,
    cos: torch.Tensor,  # (positions, hd)
    signed_sin: torch.Tensor,
    positions: torch.Tensor,  # (M,) int64
    slots: torch.Tensor,  # (M,) int64
    block_tables: torch.Tensor,  # (M, n_blk) int64
    tokens_per_block: int,
) -> bool:
    """Run every layer on h; False (nothing changed) where the kernel could not run."""
    fn = load()
    if fn is None or not (h.is_contiguous() and kv_data.is_contiguous() and cos.is_contiguous()):
        return False
    positions, slots, tables = (t.contiguous() for t in (positions, slots, block_tables))
    _, _, n_slots, n_kv, hd = kv_data.shape
    rc = fn(
        table, len(table), DTYPES[h.dtype], h.data_ptr(), kv_data.data_ptr(), h.shape[0], h.shape[1], n_heads, n_kv,
        hd, intermediate, n_slots, eps, scale, cos.data_ptr(), signed_sin.data_ptr(), positions.data_ptr(),
        slots.data_ptr(), tables.data_ptr(), tables.shape[1], tokens_per_block, torch.get_num_threads(),
    )  # fmt: skip
    return rc == 0
