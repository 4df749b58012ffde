"""Every decoder layer of a decode step in one call (`decode_layers.c`), built by
trtserve/kernels/native.py: for a few sequences with one new token each, over plain weights in
the model dtype (or W8A16's int8 with per-output scales, or W4A16's int4 pack with group scales)
and an unquantized paged KV cache. The decoder runs its per-op path where `pack` or `run` says no."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import dense, native, pointwise
from trtserve.kernels import int4 as int4_kernel
from trtserve.kernels.experts import INT4, INT8, int4_groupwise, int8_weight_only

SOURCE = Path(__file__).with_name("decode_layers.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
LINEARS = ("qkv", "dense", "fc_gate", "proj")
FIELDS = ("input_norm", "qkv", "qkv_bias", "dense", "post_norm", "fc_gate", "fc_gate_bias", "proj", "proj_bias")
# The layer features (trtserve/models/features.py) decode_layers.c implements; the decoder takes
# this path only for models whose features are a subset. Embeddings and lm_head (their scale and
# soft-cap too) are outside the kernel, tied or not.
FEATURES = frozenset(
    {
        "rms_norm",  # norm_row: x * rsqrt(mean(x^2) + eps) * w
        "offset_norm",  # and x * rsqrt(...) * (offset + w) in float32 (Step.offset)
        "sandwich_norms",  # attn_out_norm, mlp_out_norm
        "residual_scale",  # Step.resid
        "rope_neox",  # rope_head over the cos / signed-sin tables
        "rope_scaling",  # in the tables the decoder passes
        "local_rope",  # each layer's own tables (Step.tables)
        "long_rope",  # at the table rows the decoder passes
        "partial_rotary",  # the tables' width (Step.rotary_dim)
        "nope_layers",  # a layer without tables
        "qk_norm",  # qk_norm_chunk over each q and k head before RoPE
        "qk_norm_wide",  # and over all of q's (k's) heads at once
        "silu_gated_mlp",  # act_mul_row over [fc; gate]
        "gelu_tanh_gated_mlp",  # Step.act
        "qkv_bias",  # qkv_b
        "mlp_bias",  # fc_gate_b, proj_b
        "attn_out_bias",  # dense_b
        "attn_softcap",  # Step.softcap
        "attn_sinks",  # sinks
        "sliding_window",  # each layer's window (Step.windows): its keys from pos + 1 - window
        "layer_windows",
        "scaled_embeddings",
        "final_softcap",
        "tied_embeddings",
        "moe",  # a layer's experts (models/moe.py) by experts.h, the op-by-op path's kernel (plain, W8A16, W4A16)
        "clamped_swiglu_experts",  # and their biases, top-k softmax and clamped SwiGLU (experts_t's fields)
    }
)
MLP_FIELDS = ("fc_gate", "fc_gate_bias", "proj", "proj_bias")  # what a layer with experts has none of
# The step features (trtserve/models/features.py) it implements: rows under LoRA adapters ("lora"), as the
# per-op path's stacked product (models/lora_step.py), each row over its own adapter's columns only.
STEP_FEATURES = frozenset({"lora"})


class _Layer(ctypes.Structure):  # layer_t in decode_layers.c
    _fields_ = (
        [(f, ctypes.c_void_p) for f in FIELDS]
        + [(f + "_s", ctypes.c_void_p) for f in LINEARS]
        + [(f + "_sz", ctypes.c_void_p) for f in LINEARS]
        + [("gs", ctypes.c_int64), ("bn", ctypes.c_int64), ("q8", ctypes.c_int64)]
        + [("moe", ctypes.c_void_p)]  # experts.h's experts_t (kernels/experts.py) or NULL
        + [("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p), ("qn", ctypes.c_int64), ("kn", ctypes.c_int64)]
        + [("attn_out_norm", ctypes.c_void_p), ("mlp_out_norm", ctypes.c_void_p)]
        + [("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p), ("window", ctypes.c_int64)]
        + [("sinks", ctypes.c_void_p), ("dense_bias", ctypes.c_void_p)]
    )


ACTS = pointwise.ACTS  # the MLP's activation by HF's hidden_act, as the pointwise kernels number them


@dataclass(frozen=True)
class Step:
    """What the model's step computes besides its layers' weights."""

    tables: list[tuple[torch.Tensor, torch.Tensor] | None]  # per layer: RoPE's (cos, signed sin) (rows, rotary_dim)
    windows: list[int | None]  # per layer: keys a query attends, itself included; None: every key
    rotary_dim: int  # each head's rotated dims: the tables' width
    offset: float = 0.0  # the norms' weight offset (ModelConfig.norm_weight_offset)
    resid: float = 1.0  # each block's output factor before its residual add (ModelConfig.residual_multiplier)
    softcap: float | None = None  # attention scores' soft-cap (ModelConfig.attn_logit_softcapping)
    act: str = "silu"  # the MLP's activation (ModelConfig.hidden_act), an ACTS key


class _Lora(ctypes.Structure):  # lora_t in decode_layers.c
    _fields_ = [("a", ctypes.c_void_p * 4), ("bt", ctypes.c_void_p * 4), ("width", ctypes.c_int64 * 4)]


class PackedLora:
    """One set of adapters side by side for `run` (lora_t per layer) and its widest linear; the tensors
    must outlive it."""

    def __init__(self, table: ctypes.Array, widest: int):
        self.table, self.widest = table, widest


def pack_lora(layers: list[dict[str, tuple[torch.Tensor, torch.Tensor]]], dtype: torch.dtype) -> PackedLora | None:
    """layers: per layer, linear role -> (A (C, in), Bᵀ (C, out)) (models/lora_step.py's Stack); None unless
    every tensor is a contiguous CPU tensor in `dtype`."""
    table, widest = (_Lora * len(layers))(), 1
    for row, per_role in zip(table, layers, strict=True):
        for f, role in enumerate(LINEARS):
            if role not in per_role:
                continue
            a, bt = per_role[role]
            if not (_cpu(a, dtype) and _cpu(bt, dtype) and a.shape[0] == bt.shape[0]):
                return None
            row.a[f], row.bt[f], row.width[f] = a.data_ptr(), bt.data_ptr(), a.shape[0]
            widest = max(widest, a.shape[0])
    return PackedLora(table, widest)


class Packed:
    """The layers' weight pointers for `run`, the weights' dtype code, and the most rows `run` takes
    (int4: those the per-op path runs on the same kernel math); the tensors must outlive it."""

    def __init__(
        self, table: ctypes.Array, wdt: int, max_rows: int, experts: list, step: Step, sinks: list[torch.Tensor]
    ):
        self.table, self.wdt, self.max_rows = table, wdt, max_rows
        self.experts = experts  # the experts' packs the table points to
        self.step, self.sinks = step, sinks  # the tables and float32 sinks the table points to


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    # layers, n_layers, dt, wdt, kdt, h, kv, M, H, n_h, n_kv, hd, I, n_slots, eps, scale, offset, resid, cap, act, rot,
    # rows, pos, slots, tables, n_blk, bs, lora, spans, lora_width, threads
    return native.function(SOURCE, "trtserve_decode_layers", "pliiipplllllllfffffilppppllppli")


def _cpu(t: object, dtype: torch.dtype) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()


def _int4_rows(t: object, dtype: torch.dtype, shape: tuple[int, int]) -> int:
    """The most rows (from 1 up) for which the per-op path runs linear t on our int4 kernel, whose
    math (int4.h) the step shares, so both give the same bits; 0 where the step cannot read t."""
    (n, k), gs, bn = shape, t.group_size, int4_kernel.block_n()
    if t.pre_quant is not None or bn is None or n % bn or k % gs or t.out_features != n:
        return 0  # an AWQ scale not folded into the norm, or a pack int4.h does not know
    sz = t.scales_zeros
    if not (_cpu(t.packed, torch.uint8) and 2 * t.packed.numel() == n * k and _cpu(sz, dtype)):
        return 0
    if tuple(sz.shape) != (k // gs, n, 2):
        return 0
    rows = 0
    while rows < dense.MAX_ROWS and t.ours(dtype, rows + 1):
        rows += 1
    return rows


def _pack_int4(row: _Layer, layer: object, dtype: torch.dtype, shapes: dict[str, tuple[int, int]]) -> int:
    """Fill row's int4 linears; the most rows they take in the step (0: the layer cannot run)."""
    rows = dense.MAX_ROWS
    for f in LINEARS:
        if layer.experts is not None and f in MLP_FIELDS:
            continue  # experts.h reads the experts' packs itself
        t = getattr(layer, f)
        if not int4_groupwise(t) or (t.group_size, t.int8_activations) != (
            layer.qkv.group_size,
            layer.qkv.int8_activations,
        ):
            return 0
        rows = min(rows, _int4_rows(t, dtype, shapes[f]))
        setattr(row, f, t.packed.data_ptr())
        setattr(row, f + "_sz", t.scales_zeros.data_ptr())
    row.gs, row.bn, row.q8 = layer.qkv.group_size, int4_kernel.block_n(), int(layer.qkv.int8_activations)
    return rows


def _pack_qk_norm(row: _Layer, layer: object, dtype: torch.dtype, shapes: dict[str, tuple[int, int]]) -> bool:
    """Fill row's q/k norms: weights in `dtype` over a head or all of q's (k's) heads (the kernel checks which)."""
    q_size = shapes["dense"][1]
    kv_size = (shapes["qkv"][0] - q_size) // 2
    q, k = layer.q_norm, layer.k_norm
    if not (_cpu(q, dtype) and _cpu(k, dtype) and q_size % q.numel() == 0 and kv_size % k.numel() == 0):
        return False
    row.q_norm, row.k_norm, row.qn, row.kn = q.data_ptr(), k.data_ptr(), q.numel(), k.numel()
    return True


def pack(layers: list, dtype: torch.dtype, shapes: dict[str, tuple[int, int]], step: Step) -> Packed | None:
    """The layers' weights for `run`, or None unless every weight is a contiguous CPU tensor in
    `dtype`, or every linear is W8A16 (int8 with float32 scales per output), or every linear is
    W4A16 that the per-op path runs on our int4 kernel for decode rows; other quantized linears take
    the per-op path. shapes: each linear's (out, in), as the kernel will read it; step: the rest."""
    if dtype not in DTYPES or step.act not in ACTS:
        return None
    first = layers[0].qkv if layers else None
    wdt = INT8 if int8_weight_only(first) else INT4 if int4_groupwise(first) else DTYPES[dtype]
    hidden = shapes["dense"][0]
    sizes = {"input_norm": hidden, "post_norm": hidden, **{f + "_bias": shapes[f][0] for f in LINEARS}}
    table, max_rows, experts = (_Layer * len(layers))(), dense.MAX_ROWS, []
    for row, layer in zip(table, layers, strict=True):
        if layer.experts is not None:  # run by experts.h, in the experts' own format (kernels/experts.py)
            if layer.experts.packed is None or layer.experts.packed.dtype != dtype:
                return None
            experts.append(layer.experts.packed)
            row.moe = ctypes.addressof(layer.experts.packed.struct)
        if wdt == INT4:
            max_rows = min(max_rows, _pack_int4(row, layer, dtype, shapes))
            if not max_rows:
                return None
        for f in FIELDS:
            if layer.experts is not None and f in MLP_FIELDS:
                continue
            t = getattr(layer, f)
            if f in LINEARS:
                if wdt == INT4:
                    continue
                if wdt == INT8:
                    if not (int8_weight_only(t) and _cpu(t.scale_f32, torch.float32)):
                        return None
                    setattr(row, f + "_s", t.scale_f32.data_ptr())
                    t = t.weight
                if not (_cpu(t, torch.int8 if wdt == INT8 else dtype) and tuple(t.shape) == shapes[f]):
                    return None
            elif t is None and f.endswith("_bias"):
                continue
            elif not (_cpu(t, dtype) and t.numel() == sizes[f]):
                return None
            setattr(row, f, t.data_ptr())
        if layer.q_norm is not None and not _pack_qk_norm(row, layer, dtype, shapes):
            return None
    sinks = _pack_attention(table, layers, dtype, hidden, step)
    return None if sinks is None else Packed(table, wdt, max_rows, experts, step, sinks)


def _pack_attention(table: ctypes.Array, layers: list, dtype: torch.dtype, hidden: int, step: Step) -> list | None:
    """Fill each row's RoPE tables, window, sinks (float32 copies, returned: the table points to them), output
    bias and block output norms; None where a tensor is not one the kernel reads."""
    sinks = []
    for row, layer, tables, window in zip(table, layers, step.tables, step.windows, strict=True):
        if layer.experts is not None and (layer.mlp_out_norm is not None or step.resid != 1.0):
            return None  # the kernel adds the experts' output as it is
        for f in ("attn_out_norm", "mlp_out_norm", "dense_bias"):
            t = getattr(layer, f)
            if t is not None:
                if not (_cpu(t, dtype) and t.numel() == hidden):
                    return None
                setattr(row, f, t.data_ptr())
        if tables is not None:
            if not all(_cpu(t, dtype) and t.shape[-1] == step.rotary_dim for t in tables):
                return None
            row.cos, row.sin = (t.data_ptr() for t in tables)
        row.window = window or 0
        if layer.sinks is not None:
            sinks.append(layer.sinks.float().contiguous())
            row.sinks = sinks[-1].data_ptr()
    return sinks


def run(
    packed: Packed,
    h: torch.Tensor,  # (M, H) residual stream in the model dtype, updated in place
    kv_data: torch.Tensor,  # (layers, 2, slots, n_kv, hd) in h's dtype, or 16-bit under a float32 h
    n_heads: int,
    intermediate: int,
    eps: float,
    scale: float,
    rows: torch.Tensor,  # (M,) int64: each sequence's row of its layers' RoPE tables
    positions: torch.Tensor,  # (M,) int64
    slots: torch.Tensor,  # (M,) int64
    block_tables: torch.Tensor,  # (M, n_blk) int64
    tokens_per_block: int,
    lora: PackedLora | None = None,  # the step's adapters (pack_lora)
    spans: torch.Tensor | None = None,  # (M, 4, 2) int64: each row's columns [c0, c1) of each linear's adapters
) -> bool:
    """Run every layer on h; False (nothing changed) where the kernel could not run, or where h has
    more rows than `packed` takes."""
    fn = load()
    if fn is None or h.shape[0] > packed.max_rows:
        return False
    if not (h.is_contiguous() and kv_data.is_contiguous()):
        return False
    rows, positions, slots, tables = (t.contiguous() for t in (rows, positions, slots, block_tables))
    if lora is not None:
        spans = spans.contiguous()
        assert spans.dtype == torch.int64 and tuple(spans.shape) == (h.shape[0], len(LINEARS), 2)
    _, _, n_slots, n_kv, hd = kv_data.shape
    step = packed.step
    rc = fn(
        packed.table, len(packed.table), DTYPES[h.dtype], packed.wdt, DTYPES[kv_data.dtype], h.data_ptr(), kv_data.data_ptr(), h.shape[0], h.shape[1], n_heads, n_kv,
        hd, intermediate, n_slots, eps, scale, step.offset, step.resid, step.softcap or 0.0, ACTS[step.act],
        step.rotary_dim, rows.data_ptr(), positions.data_ptr(),
        slots.data_ptr(), tables.data_ptr(), tables.shape[1], tokens_per_block,
        lora.table if lora is not None else None, spans.data_ptr() if lora is not None else None,
        lora.widest if lora is not None else 0, torch.get_num_threads(),
    )  # fmt: skip
    return rc == 0
