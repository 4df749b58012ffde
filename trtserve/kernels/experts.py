"""The expert kernel (`experts.c`, `experts.h`): one layer's mixture of experts in one call (route, group
the rows by expert, each used expert once over its rows, combine), built by trtserve/kernels/native.py.
models/moe.py runs it for prefill and op-by-op decode; the one-call decode step (decode_layers.c) runs
the same code on the `Packed` weights `pack` returns. Where it cannot run, the torch path does."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("experts.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
MAX_TOP_K = 64  # experts.h's combine holds a row's experts on the stack


class Struct(ctypes.Structure):  # experts_t in experts.h
    _fields_ = [(f, ctypes.c_void_p) for f in ("gates", "fc_gate", "proj", "shared_fc_gate", "shared_proj")] + [
        (f, ctypes.c_int64) for f in ("E", "k", "I", "S", "renorm")
    ]


class Packed:
    """One layer's experts for the kernel: the struct, its dtype, and the tensors it points into (kept
    alive with it)."""

    def __init__(self, struct: Struct, dtype: torch.dtype, tensors: tuple[torch.Tensor, ...]):
        self.struct, self.dtype, self._tensors = struct, dtype, tensors


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    return native.function(SOURCE, "trtserve_experts", "ppillpi")  # experts, x, dt, M, H, y, threads


def _plain(t: torch.Tensor | None, dtype: torch.dtype) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()


def pack(
    gates: torch.Tensor,  # (E (+1), hidden): the router's rows, then the shared expert's gate row
    fc_gate: torch.Tensor,  # (E, 2 * I, hidden)
    proj: torch.Tensor,  # (E, hidden, I)
    top_k: int,
    renormalize: bool,
    shared_fc_gate: torch.Tensor | None = None,  # (2 * S, hidden)
    shared_proj: torch.Tensor | None = None,  # (hidden, S)
) -> Packed | None:
    """The experts for `run` and decode_layers.c, or None unless every tensor is a contiguous CPU tensor
    in one float dtype (quantized experts run the torch path)."""
    dtype = gates.dtype
    tensors = (gates, fc_gate, proj) + ((shared_fc_gate, shared_proj) if shared_fc_gate is not None else ())
    if dtype not in DTYPES or not all(_plain(t, dtype) for t in tensors) or not 1 <= top_k <= MAX_TOP_K:
        return None
    (e, two_i, hidden), s = fc_gate.shape, 0 if shared_fc_gate is None else shared_fc_gate.shape[0] // 2
    if gates.shape != (e + (s > 0), hidden) or proj.shape != (e, hidden, two_i // 2):
        return None
    ptr = [t.data_ptr() for t in tensors] + [None] * (5 - len(tensors))
    struct = Struct(*ptr, e, top_k, two_i // 2, s, int(renormalize))
    return Packed(struct, dtype, tensors)


def run(packed: Packed, x: torch.Tensor) -> torch.Tensor | None:
    """The experts' output (T, hidden) on the normed x (T, hidden); None where the kernel cannot run it."""
    fn = load()
    if fn is None or x.device.type != "cpu" or x.dtype != packed.dtype or x.dim() != 2 or not len(x):
        return None
    x = x.contiguous()
    y = torch.empty_like(x)
    rc = fn(
        ctypes.addressof(packed.struct), x.data_ptr(), DTYPES[x.dtype], x.shape[0], x.shape[1], y.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    return y if rc == 0 else None
