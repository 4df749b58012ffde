"""The decoder's per-token glue (`pointwise.c`), built by trtserve/kernels/native.py: residual
add + RMSNorm, RoPE with the KV-cache write, and SiLU(fc) (or GeLU's) * gate, one call each instead of 3-8
torch ops. Each function returns None (having written nothing) where the kernel cannot run, and
the decoder then runs its torch ops."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("pointwise.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
# The layer features (trtserve/models/features.py) these kernels compute or leave alone; the
# decoder uses them only for models whose features are a subset.
FEATURES = frozenset(
    {
        "rms_norm",  # add_rms_norm
        "offset_norm",  # its offset
        "rope_neox",  # rope_kv, over the cos / signed-sin tables the decoder passes
        "rope_scaling",  # in those tables
        "local_rope",
        "long_rope",  # and at the rows it passes
        "partial_rotary",  # rope_kv's rotary_dim
        "nope_layers",  # rope_kv without tables
        "qk_norm",  # rope_kv's q_norm / k_norm, per head
        "qk_norm_wide",  # and over all heads at once
        "silu_gated_mlp",  # act_mul over [fc; gate]
        "gelu_tanh_gated_mlp",
        "qkv_bias",  # the rest happen outside these kernels
        "mlp_bias",
        "attn_out_bias",
        "sandwich_norms",  # add_rms_norm without a residual
        "residual_scale",
        "scaled_embeddings",
        "final_softcap",
        "attn_softcap",  # attention's (kernels/attention.py)
        "attn_sinks",
        "sliding_window",
        "layer_windows",
        "tied_embeddings",
        "moe",  # the experts run outside these kernels (models/moe.py); the glue around them is the same
        "clamped_swiglu_experts",  # gpt-oss's experts, outside these kernels too
    }
)
ACTS = {"silu": 0, "gelu_pytorch_tanh": 1}  # act_mul's activations by HF's hidden_act (pointwise.h's SILU, GELU_TANH)


# each C function's arguments, by native.function's letters
ARGS = {
    "trtserve_rms_norm": "ppillpffpi",
    "trtserve_rope_kv": "piillllpppppppppllffli",
    "trtserve_act_mul": "pillipi",
    "trtserve_argmax": "pllpi",
}


@cache
def _fn(name: str):
    return native.function(SOURCE, name, ARGS[name])


def usable(x: torch.Tensor) -> bool:
    """Whether the kernels take rows of x: a contiguous 2-D CPU batch in a float dtype (any row count: one
    pass over the rows beats torch's 3-8 passes at prefill sizes too, docs/performance.md)."""
    return (
        x.device.type == "cpu"
        and x.dtype in DTYPES
        and x.dim() == 2
        and x.is_contiguous()
        and _fn("trtserve_rms_norm") is not None
    )


def add_rms_norm(
    h: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float, offset: float = 0.0
) -> torch.Tensor | None:
    """h += delta in place (when given), then RMSNorm(h) * weight (or * (offset + weight) in float32, Gemma's);
    h, delta (T, H) contiguous, weight (H,)."""
    if delta is not None and not delta.is_contiguous():
        return None
    out = torch.empty_like(h)
    rc = _fn("trtserve_rms_norm")(
        h.data_ptr(), None if delta is None else delta.data_ptr(), DTYPES[h.dtype], h.shape[0], h.shape[1],
        weight.data_ptr(), eps, offset, out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return out if rc == 0 else None


def rope_kv(
    qkv: torch.Tensor,  # (T, (n_h + 2 n_kv) * hd): q, k, v heads
    n_h: int,
    n_kv: int,
    cos: torch.Tensor | None,  # (rows, rotary_dim); None: q and k are not rotated (features.NOPE_LAYERS)
    signed_sin: torch.Tensor | None,  # (rows, rotary_dim)
    positions: torch.Tensor,  # (T,) int64: each token's table row
    k_cache: torch.Tensor,  # (slots, n_kv, hd) in qkv's dtype, or 16-bit under a float32 qkv (rounded to it)
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # (T,) int64
    q_norm: torch.Tensor | None = None,  # (hd,) per head, or (n_h * hd,) over all heads (qk_norm_wide)
    k_norm: torch.Tensor | None = None,  # (hd,) or (n_kv * hd,)
    eps: float = 0.0,
    offset: float = 0.0,  # the norms' weight offset (add_rms_norm's)
) -> torch.Tensor | None:
    """Rotated q (T, n_h * hd), each head's first rotary_dim dims; the rotated k and v are written to the cache
    at `slots`. With q_norm and k_norm, q and k are RMS-normed first, in place in qkv."""
    hd = k_cache.shape[-1]
    rot = 0 if cos is None else cos.shape[-1]
    tables = cos is None or (cos.is_contiguous() and signed_sin.is_contiguous())
    if not (k_cache.is_contiguous() and v_cache.is_contiguous() and tables and qkv.is_contiguous()):
        return None
    normed = q_norm is not None
    if normed and not all(t.is_contiguous() and t.dtype == qkv.dtype for t in (q_norm, k_norm)):
        return None
    positions, slots = positions.contiguous(), slots.contiguous()
    q = qkv.new_empty(qkv.shape[0], n_h * hd)
    rc = _fn("trtserve_rope_kv")(
        qkv.data_ptr(), DTYPES[qkv.dtype], DTYPES[k_cache.dtype], qkv.shape[0], n_h, n_kv, hd,
        None if cos is None else cos.data_ptr(),
        None if cos is None else signed_sin.data_ptr(),
        positions.data_ptr(), q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(),
        q_norm.data_ptr() if normed else None, k_norm.data_ptr() if normed else None,
        q_norm.numel() if normed else 0, k_norm.numel() if normed else 0, eps, offset, rot, torch.get_num_threads(),
    )  # fmt: skip
    return q if rc == 0 else None


def act_mul(fc_gate: torch.Tensor, act: str = "silu") -> torch.Tensor | None:
    """act(fc) * gate for fc_gate (T, 2 I) = [fc | gate], act an ACTS key; (T, I)."""
    if act not in ACTS:
        return None
    t, i2 = fc_gate.shape
    out = fc_gate.new_empty(t, i2 // 2)
    rc = _fn("trtserve_act_mul")(fc_gate.data_ptr(), DTYPES[fc_gate.dtype], t, i2 // 2, ACTS[act], out.data_ptr(),
                                 torch.get_num_threads())  # fmt: skip
    return out if rc == 0 else None


def argmax(logits: torch.Tensor) -> list[int] | None:
    """Each row's index of its largest value (the first of ties; of its first NaN where it has one), as
    torch.max(dim=-1).indices gives them; None where the kernel cannot run (then use torch's)."""
    if not (logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.dim() == 2):
        return None
    if logits.shape[0] == 0 or not logits.is_contiguous() or _fn("trtserve_argmax") is None:
        return None
    out = torch.empty(logits.shape[0], dtype=torch.long)
    rc = _fn("trtserve_argmax")(logits.data_ptr(), logits.shape[0], logits.shape[1], out.data_ptr(),
                                torch.get_num_threads())  # fmt: skip
    return out.tolist() if rc == 0 else None
