"""The expert kernel (`experts.c`, `experts.h`): one layer's mixture of experts in one call (route, group
the rows by expert, each used expert once over its rows, combine), built by trtserve/kernels/native.py.
models/moe.py runs it for prefill and op-by-op decode; the one-call decode step (decode_layers.c) runs
the same code on the `Packed` weights `pack` returns. Experts may be plain, W8A16 (int8 per output) or
W4A16 (torch's CPU int4 pack), run by the dense and int4 kernels' own math (gemv.h, int4.h); where the
kernel cannot run them, the torch path does."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import int4 as int4_kernel
from trtserve.kernels import native

SOURCE = Path(__file__).with_name("experts.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
INT8, INT4 = 3, 4  # the C kernels' weight dtype codes for W8A16 and W4A16 (dtypes.h's I8, int4.h's I4)
MAX_TOP_K = 64  # experts.h's combine holds a row's experts on the stack


class Struct(ctypes.Structure):  # experts_t in experts.h
    _fields_ = (
        [(f, ctypes.c_void_p) for f in ("gates", "fc_gate", "proj", "fc_gate_s", "proj_s")]
        + [(f, ctypes.c_void_p) for f in ("gates_b", "fc_gate_b", "proj_b")]
        + [(f, ctypes.c_int64) for f in ("E", "k", "I", "S", "renorm", "wdt", "gs", "bn", "top_softmax")]
        + [("alpha", ctypes.c_float), ("limit", ctypes.c_float)]
    )


class Packed:
    """One layer's experts for the kernel: the struct, its dtype, and the tensors and pointer tables it
    points into (kept alive with it)."""

    def __init__(self, struct: Struct, dtype: torch.dtype, keep: tuple):
        self.struct, self.dtype, self._keep = struct, dtype, keep


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    fn = native.function(SOURCE, "trtserve_experts", "ppillpi")  # experts, x, dt, M, H, y, threads
    if fn is not None:
        fn.restype = ctypes.c_int64  # the routed experts read, or -1
    return fn


def _plain(t: object, dtype: torch.dtype) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()


def int8_weight_only(linear: object) -> bool:
    """A W8A16 linear the kernels run (models/quantized.py's Int8WeightOnly says so): `weight` (out, in)
    int8 and `scale_f32` (out,) float32, nothing else applied to its input."""
    return getattr(linear, "int8_weight_only", False) is True


def int4_groupwise(linear: object) -> bool:
    """A W4A16 linear (models/quantized.py's Int4Groupwise says so): torch's CPU int4 `packed`, its
    `scales_zeros` (in / group, out, 2) in the model dtype, `group_size`, `pre_quant` or None."""
    return getattr(linear, "int4_groupwise", False) is True


def _format(linear: object, dtype: torch.dtype) -> int | None:
    """The weight dtype code of an expert's linear (models/quantized.py's linears say theirs)."""
    if isinstance(linear, torch.Tensor):
        return DTYPES.get(dtype)
    return INT8 if int8_weight_only(linear) else INT4 if int4_groupwise(linear) else None


def _weights(linear: object, dtype: torch.dtype, shape: tuple[int, int], wdt: int) -> tuple | None:
    """(weight, scales) of one expert's linear (out, in) in format wdt, or None where the kernel cannot read
    it: a plain tensor; W8A16's int8 weight and float32 scales (models/quantized.py's Int8WeightOnly); W4A16's
    int4 pack and (in / group, out, 2) scales and zeros in dtype (Int4Groupwise, no AWQ scale, no int8
    activations: int4.h's float path, as its per-op linear runs it)."""
    if _format(linear, dtype) != wdt:
        return None
    n, k = shape
    if wdt == DTYPES.get(dtype):
        return (linear, None) if _plain(linear, dtype) and tuple(linear.shape) == shape else None
    if wdt == INT8:
        w, s = linear.weight, linear.scale_f32
        ok = _plain(w, torch.int8) and tuple(w.shape) == shape and _plain(s, torch.float32) and s.numel() == n
        return (w, s) if ok else None
    p, sz, gs, bn = linear.packed, linear.scales_zeros, linear.group_size, int4_kernel.block_n()
    if linear.pre_quant is not None or linear.int8_activations or not linear.kernel or bn is None or k % gs or n % bn:
        return None  # int4.h's units: blocks divide the outputs, groups the inputs
    ok = _plain(p, torch.uint8) and 2 * p.numel() == n * k and _plain(sz, dtype) and tuple(sz.shape) == (k // gs, n, 2)
    return (p, sz) if ok else None


def _out(linear: object) -> int:
    """Output features of a tensor (out, in) or a quantized linear."""
    if isinstance(linear, torch.Tensor):
        return linear.shape[0]
    return linear.weight.shape[0] if hasattr(linear, "weight") else linear.out_features


def pack(
    gates: torch.Tensor,  # (E (+1), hidden): the router's rows, then the shared expert's gate row
    fc_gate: torch.Tensor | list,  # (E, 2 * I, hidden), or E quantized linears (2 * I, hidden)
    proj: torch.Tensor | list,  # (E, hidden, I), or E quantized linears
    top_k: int,
    renormalize: bool,
    shared_fc_gate: object | None = None,  # (2 * S, hidden), a tensor or a quantized linear
    shared_proj: object | None = None,  # (hidden, S)
    router_bias: torch.Tensor | None = None,  # (E,)
    fc_gate_bias: torch.Tensor | None = None,  # (E, 2 * I)
    proj_bias: torch.Tensor | None = None,  # (E, hidden)
    swiglu: tuple[float, float] | None = None,  # (alpha, limit): the clamped SwiGLU, each row's top-k logits softmaxed
) -> Packed | None:
    """The experts for `run` and decode_layers.c, or None unless gates and biases are contiguous CPU tensors
    in one float dtype and every expert linear (the shared one's too) is one format `_weights` reads."""
    dtype, e = gates.dtype, len(fc_gate)
    wdt = _format(fc_gate[0], dtype) if e else None
    if dtype not in DTYPES or wdt is None or not 1 <= top_k <= min(e, MAX_TOP_K) or not _plain(gates, dtype):
        return None
    hidden, i, s = gates.shape[1], _out(fc_gate[0]) // 2, 0 if shared_fc_gate is None else _out(shared_fc_gate) // 2
    biases = (router_bias, (e,)), (fc_gate_bias, (e, 2 * i)), (proj_bias, (e, hidden))  # experts_t's order
    if tuple(gates.shape) != (e + (s > 0), hidden) or len(proj) != e:
        return None
    if any(b is not None and not (_plain(b, dtype) and tuple(b.shape) == shape) for b, shape in biases):
        return None
    fc = [_weights(fc_gate[x], dtype, (2 * i, hidden), wdt) for x in range(e)]
    pr = [_weights(proj[x], dtype, (hidden, i), wdt) for x in range(e)]
    if s:  # the shared expert's, last in the tables
        fc.append(_weights(shared_fc_gate, dtype, (2 * s, hidden), wdt))
        pr.append(_weights(shared_proj, dtype, (hidden, s), wdt))
    linears = [*fc_gate, *proj, *([shared_fc_gate, shared_proj] if s else [])]
    gs = fc_gate[0].group_size if wdt == INT4 else 0
    if any(h is None for h in fc + pr) or (wdt == INT4 and any(lin.group_size != gs for lin in linears)):
        return None
    scaled = wdt in (INT8, INT4)

    def table(part: int, held: list) -> ctypes.Array:  # experts_t's pointer tables: weights (0) or scales (1)
        return (ctypes.c_void_p * len(held))(*(h[part].data_ptr() for h in held))

    tables = [table(0, fc), table(0, pr)] + ([table(1, fc), table(1, pr)] if scaled else [])
    alpha, limit = swiglu if swiglu is not None else (0.0, 0.0)
    struct = Struct(
        gates.data_ptr(), *(ctypes.addressof(t) for t in tables), *([] if scaled else [None, None]),
        *(None if b is None else b.data_ptr() for b, _ in biases),
        e, top_k, i, s, int(renormalize), wdt, gs, int4_kernel.block_n() if wdt == INT4 else 0,
        int(swiglu is not None), alpha, limit,
    )  # fmt: skip
    return Packed(struct, dtype, (gates, fc_gate, proj, shared_fc_gate, shared_proj, biases, tables, fc, pr))


def run(packed: Packed, x: torch.Tensor) -> tuple[torch.Tensor, int] | None:
    """The experts' output (T, hidden) on the normed x (T, hidden), and how many routed experts' weights the
    call read; None where the kernel cannot run it."""
    fn = load()
    if fn is None or x.device.type != "cpu" or x.dtype != packed.dtype or x.dim() != 2 or not len(x):
        return None
    x = x.contiguous()
    y = torch.empty_like(x)
    read = fn(
        ctypes.addressof(packed.struct), x.data_ptr(), DTYPES[x.dtype], x.shape[0], x.shape[1], y.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    return (y, read) if read >= 0 else None
