"""Quantized linears of the torch engine, one class per run-time kernel, named by the format specs
(models/quant_formats.py). Weights stay in their 8- or 4-bit storage; each is built as
`Class(tensors, dtype, group_size)` and its `__call__(x, bias)` maps (tokens, in) -> (tokens, out)
in the activation dtype.

Tensor names and layouts are the engine's (TensorRT-LLM suffixes, see trtserve/quant/convert.py):
weight [out, in] (int8 / fp8), [out/2, in] packed int4, or [out, in/2] packed fp4.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trtserve.kernels import dense
from trtserve.kernels import int4 as int4_kernel
from trtserve.models.quant_formats import quant_format

_FP8_MAX = 448.0
_SLAB_ELEMENTS = 1 << 20  # weights widened to float32 at once by Int8WeightOnly's prefill GEMM (4 MB)
# E2M1 code -> value (bit 3 is the sign).
_E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def _fp8_fake_quant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Round activations through e4m3 with a per-tensor (or per-token, broadcast) scale, with
    ModelOpt's arithmetic (multiply by 448 / amax, then by its float32 reciprocal)."""
    mult = _FP8_MAX / (scale.float() * _FP8_MAX)
    q = (x.float() * mult).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
    return (q.float() * (1 / mult)).to(x.dtype)


def unpack_int4_rows(packed: torch.Tensor) -> torch.Tensor:
    """[out/2, in] bytes, two's-complement nibbles, row 2i in the low nibble -> int8 [out, in]."""
    p = packed.view(torch.int8)
    lo = (p << 4) >> 4  # arithmetic shifts sign-extend
    hi = p >> 4
    return torch.stack([lo, hi], dim=1).reshape(-1, p.shape[1])


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """[out, in/2] E2M1 bytes, even input index in the low nibble -> float32 [out, in]."""
    p = packed.view(torch.uint8)
    codes = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)
    return _E2M1[codes.long()]


class Int8WeightOnly:
    """W8A16: int8 weights with per-output-channel scales: our decode kernel (trtserve/kernels/dense.py)
    for float32 decode rows, torch's int8 weight-pack GEMM for the rest (bf16 inputs, prefill) or
    where the kernel cannot be built. A decode step that runs whole in trtserve/kernels/decode_layers.c
    reads `weight` and `scale_f32` there, for every activation dtype."""

    int8_weight_only = True  # what trtserve/kernels/decode_layers.py looks for (it imports no model code)

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        w = t["weight"].contiguous()  # (out, in) int8
        # torch's AVX-512 kernel reads the weight with aligned loads at prefill sizes: a tensor at
        # an arbitrary offset of the safetensors buffer crashed it (SIGSEGV), so copy it to a
        # fresh (64-byte aligned) allocation.
        self.weight = w if w.data_ptr() % 64 == 0 else w.clone()
        self.scale = t["weights_scaling_factor"].to(dtype)  # (out,)
        self.scale_f32 = self.scale.float()  # the decode kernel's, rounded as torch's kernel sees it

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        y = dense.gemm(x, self.weight, self.scale_f32) if dense.usable(x, self.weight) else None
        if y is None and x.dtype == torch.float32 and x.dim() == 2:
            y = self._dequantized_gemm(x)
        if y is None:
            y = torch._weight_int8pack_mm(x.contiguous(), self.weight, self.scale)
        return y if bias is None else y + bias

    def _dequantized_gemm(self, x: torch.Tensor) -> torch.Tensor:
        """float32 rows past the decode kernel's (prefill): torch's int8 kernel runs float32 inputs at
        1-2 GFLOP/s where float32 GEMM runs 20-120 here, so the weight is widened to float32 a slab
        of output rows at a time (a bounded temporary, about 4 MB) and multiplied densely. The result
        equals the int8 kernel's up to float32 summation order."""
        rows, (t, n) = max(16, _SLAB_ELEMENTS // self.weight.shape[1]), (x.shape[0], self.weight.shape[0])
        if rows >= n:
            return F.linear(x, self.weight.float()) * self.scale_f32
        y = torch.empty(t, n, dtype=x.dtype)  # (tokens, out)
        for a in range(0, n, rows):
            torch.mul(
                F.linear(x, self.weight[a : a + rows].float()), self.scale_f32[a : a + rows], out=y[:, a : a + rows]
            )
        return y


class Int4Groupwise:
    """W4A16(_AWQ): packed int4 with per-group scales, repacked once into torch's CPU int4 layout.
    Every float32 input (torch's kernel runs those 12-40x slower) and, on AVX2 builds of torch,
    bf16 decode rows go to our AVX2 kernel over that same pack (trtserve/kernels/int4.py,
    `preferred`); the rest, or everything where that kernel cannot be built, to torch's int4 GEMM. AWQ's pre-quant scale (where the export did
    not fold it into the norm) is applied to the input."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        w = unpack_int4_rows(t["weight"])  # (out, in) in [-8, 7]
        self.out_features = w.shape[0]
        self.group_size = group_size
        self.packed = torch._convert_weight_to_int4pack_for_cpu((w.int() + 8).contiguous(), 1)
        scale = t["weights_scaling_factor"].float()  # (out, in / group)
        # torch's kernel computes (q - 8) * scale + zero per group: zero = 0 for symmetric int4.
        self.scales_zeros = torch.stack([scale.t(), torch.zeros_like(scale.t())], dim=-1).to(dtype).contiguous()
        pqs = t.get("prequant_scaling_factor")
        self.pre_quant = None if pqs is None else pqs.to(dtype)  # (in,)
        self.kernel = int4_kernel.supports(dtype, self.out_features)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_quant is not None:
            x = x * self.pre_quant
        x = x.contiguous()
        y = None
        mine = self.kernel and x.device.type == "cpu" and int4_kernel.preferred(x.dtype, x.shape[0])
        if mine and x.dtype == self.scales_zeros.dtype:
            y = int4_kernel.int4_gemm(x, self.packed, self.scales_zeros, self.group_size)
        if y is None:
            y = torch._weight_int4pack_mm_for_cpu(x, self.packed, self.group_size, self.scales_zeros)
        return y if bias is None else y + bias


class Int4Fp8Awq:
    """W4A8_AWQ: int4 weights whose group-dequantized values ModelOpt rounds through e4m3 with the
    global scale (w = e4m3(int4 x group scale / scale_2) x scale_2), so they are not int4 x scale and
    the int4 GEMM cannot run them: the packed weights are decoded per call. Activations: pre-quant
    scale, then e4m3 rounding with the calibrated scale."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.packed = t["weight"]  # (out / 2, in) int4 pairs
        self.scale = t["weights_scaling_factor"].float()  # (out, in / group)
        self.scale_2 = t["weights_scaling_factor_2"].float()  # (1,)
        pqs = t.get("prequant_scaling_factor")
        self.pre_quant = None if pqs is None else pqs.to(dtype)
        self.act_scale = t["activation_scaling_factor"].float()

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        w = unpack_int4_rows(self.packed).float()  # (out, in)
        w = w * self.scale.repeat_interleave(w.shape[1] // self.scale.shape[1], dim=1)
        return _fp8_fake_quant(w, self.scale_2).to(dtype)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_quant is not None:
            x = x * self.pre_quant
        return F.linear(_fp8_fake_quant(x, self.act_scale), self.dequantize(x.dtype), bias)


class Int8SmoothQuant:
    """W8A8_SQ_PER_CHANNEL: the smoothed input quantized to int8 per token (dynamic scale = the
    token's amax / 127, as TensorRT-LLM's per-token SmoothQuant plugin does), times int8 weights
    with per-channel scales. The checkpoint's calibrated per-tensor activation scale stays in the
    file for TensorRT-LLM; on SmolLM2-135M it costs +28% perplexity where per-token costs little.

    The product runs as an fp32 GEMM on the int8 values (exact for the sums that occur: fp32 holds
    integers to 2**24): torch 2.13's CPU `torch._int_mm` measured 0.5-1 GOP/s here, against 5-22
    GFLOP/s for fp32, single-threaded. Weights stay int8 in memory."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.weight = t["weight"].contiguous()  # (out, in) int8
        self.w_scale = t["weights_scaling_factor"].float()  # (out,)
        pqs = t.get("prequant_scaling_factor")
        self.pre_quant = None if pqs is None else pqs.to(dtype)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_quant is not None:
            x = x * self.pre_quant
        xf = x.float()
        tok_scale = xf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-8) / 127  # (T, 1)
        xq = (xf / tok_scale).round_().clamp_(-127, 127)  # (T, in), int8 values
        y = (F.linear(xq, self.weight.float()) * (tok_scale * self.w_scale)).to(x.dtype)  # (T, out)
        return y if bias is None else y + bias


class Fp8Linear:
    """FP8 (per-tensor weight and activation scales) and FP8_PER_CHANNEL_PER_TOKEN (per-channel
    weight scales, dynamic per-token activation scales): e4m3 storage, dequantized in the GEMM."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.weight = t["weight"]  # (out, in) float8_e4m3fn
        # (out,) for FP8_PER_CHANNEL_PER_TOKEN, and for FP8 where fused q/k/v (gate/up) keep their
        # own per-tensor scales; (1,) otherwise.
        scale = t.get("per_channel_scale", t.get("weights_scaling_factor"))
        self.per_channel = scale.numel() > 1
        self.w_scale = scale.float()
        act = t.get("activation_scaling_factor")
        self.act_scale = None if act is None else act.float()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.act_scale is not None:
            x = _fp8_fake_quant(x, self.act_scale)
        else:  # per token
            amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(2**-24)
            x = _fp8_fake_quant(x, amax / _FP8_MAX)
        w = self.weight.to(x.dtype)  # exact: every e4m3 value is a bf16/fp16 value
        if self.per_channel:
            return F.linear(x, w) * self.w_scale.to(x.dtype) + (0 if bias is None else bias)
        return F.linear(x, w * self.w_scale.to(x.dtype), bias)


class Nvfp4Linear:
    """NVFP4: E2M1 weights with fp8 scales per 16 inputs and a global scale, dequantized per
    call. Activations stay in the model dtype (no fp4 compute on CPU)."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.weight = t["weight"]  # (out, in / 2) uint8
        self.block_scale = t["weights_scaling_factor"]  # (out, in / 16) float8_e4m3fn
        self.global_scale = t["weights_scaling_factor_2"].float()  # (1,)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        w = unpack_fp4(self.weight)  # (out, in)
        s = self.block_scale.float() * self.global_scale  # (out, in / 16)
        return (w.view(w.shape[0], s.shape[1], -1) * s[..., None]).view(w.shape).to(dtype)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(x, self.dequantize(x.dtype), bias)


def make_linear(t: dict[str, torch.Tensor], algo: str, dtype: torch.dtype, group_size: int = 128):
    """The kernel object for one quantized linear (`t`: its tensors by TensorRT-LLM suffix), as the
    format's spec names it; ValueError for a quant_algo no spec is registered for."""
    return quant_format(algo).kernel()(t, dtype, group_size)
