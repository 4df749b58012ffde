"""Quantized linears of the torch engine, one class per run-time kernel, named by the format specs
(models/quant_formats.py). Weights stay in their 8- or 4-bit storage; each is built as
`Class(tensors, dtype, group_size)` and its `__call__(x, bias)` maps (tokens, in) -> (tokens, out)
in the activation dtype.

Tensor names and layouts are the engine's (TensorRT-LLM suffixes, see trtserve/quant/convert.py):
weight [out, in] (int8 / fp8), [out/2, in] packed int4, or [out, in/2] packed fp4.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from trtserve.kernels import dense, widen
from trtserve.kernels import int4 as int4_kernel
from trtserve.models.quant_formats import quant_format

_FP8_MAX = widen.FP8_MAX
# The slab of widened weight rows the dequantizing GEMMs write at once: a bounded temporary, never the
# whole weight (unless smaller). 8 MB: smaller slabs starve the bf16 AMX GEMM (docs/performance.md).
_SLAB_BYTES = 8 << 20
# float32 rows from which W4A16 widens slabs rather than run the int4 decode kernel (the crossover).
_INT4_SLAB_ROWS = 64

# (rows a, rows b, out): write rows a:b of a linear's weight, as values rounded to the activation
# dtype, into out ((b - a, in), float32 or the GEMM's bfloat16; k-major where slab_linear is asked)
Widen = Callable[[int, int, torch.Tensor], None]


def _fp8_fake_quant(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Round activations (tokens, in) through e4m3 with a per-tensor (or per-token, (tokens, 1))
    scale, with ModelOpt's arithmetic (multiply by 448 / amax, then by its float32 reciprocal); None:
    per token, from each row's amax (widen.fp8_round). Values of x's dtype, held in the dtype the
    linear's GEMM runs in where that is bf16 (no conversion pass before it), in float32 otherwise."""
    held = torch.bfloat16 if _gemm_dtype(x.dtype, x.shape[0], x.device) == torch.bfloat16 else torch.float32
    if scale is None:
        return widen.fp8_round(x, None, None, x.dtype, held)
    mult = _FP8_MAX / (scale.float() * _FP8_MAX)
    return widen.fp8_round(x, mult, 1 / mult, x.dtype, held)


def unpack_int4_rows(packed: torch.Tensor) -> torch.Tensor:
    """[out/2, in] bytes, two's-complement nibbles, row 2i in the low nibble -> int8 [out, in]."""
    p = packed.view(torch.int8)
    lo = (p << 4) >> 4  # arithmetic shifts sign-extend
    hi = p >> 4
    return torch.stack([lo, hi], dim=1).reshape(-1, p.shape[1])


def _gemm_dtype(dtype: torch.dtype, rows: int, device: torch.device) -> torch.dtype:
    """The dtype a GEMM of `rows` rows of `dtype` runs in: float32 for bf16 / fp16 prefill batches on a
    CPU without that dtype's matmul instructions (as trtserve/kernels/dense.py's `upcast`: torch's
    GEMM emulates them several times slower), `dtype` otherwise."""
    if dtype == torch.float32 or rows < dense.UPCAST_ROWS or device.type != "cpu":
        return dtype
    return torch.float32 if dtype in dense.NATIVE and not dense.native_matmul(dtype) else dtype


def _native_prefill(x: torch.Tensor) -> bool:
    """A bf16 / fp16 CPU prefill batch of a dtype whose matmul instructions the CPU has (the batches
    _gemm_dtype keeps in their dtype; on CUDA torch's own kernels stay)."""
    return x.device.type == "cpu" and x.shape[0] >= dense.UPCAST_ROWS and dense.native_matmul(x.dtype)


def slab_linear(
    x: torch.Tensor,
    dtype: torch.dtype,
    widen_rows: Widen,
    out_features: int,
    scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    k_major: bool = False,
) -> torch.Tensor:
    """(F.linear(x, W) * scale + bias) in `dtype`, W (out, in) written a slab of output rows at a time
    by `widen_rows`, so no copy of the whole weight is made: x (tokens, in) holds values of `dtype`
    (in float32 or `dtype`); scale: (out,) per output channel, or None. The GEMM runs in _gemm_dtype,
    and a bf16 GEMM's slab is widened straight to bf16 (a float32 slab and its conversion cost an AMX
    GEMM as much as the GEMM); k_major: the slab is (in, rows), handed over as its transpose (for
    packs whose bytes run along the outputs). Results equal those over the whole widened weight up to
    the GEMM's summation order."""
    gd = _gemm_dtype(dtype, x.shape[0], x.device)
    x = x if x.dtype == gd else x.to(gd)  # exact: x holds values of dtype (the checks spare decode steps a few us)
    (t, k), n = x.shape, out_features
    sd = torch.bfloat16 if gd == torch.bfloat16 else torch.float32  # the slab's dtype
    # even: a slab of packed int4 rows starts on a byte row
    rows = min(n, max(16, _SLAB_BYTES // sd.itemsize // k // 2 * 2))
    s = None if scale is None else scale.to(dtype).to(gd)
    # reused by every slab: (rows, in), or the transpose of (in, rows)
    slab = (
        torch.empty(k, rows, dtype=sd, device=x.device).t()
        if k_major
        else torch.empty(rows, k, dtype=sd, device=x.device)
    )
    y = None if rows == n else torch.empty(t, n, dtype=gd, device=x.device)  # (tokens, out)
    for a in range(0, n, rows):
        b = min(a + rows, n)
        w = slab if b - a == rows else slab[: b - a]
        widen_rows(a, b, w)
        part = F.linear(x, w if w.dtype == gd else w.to(gd))  # exact: w holds values of dtype
        if y is None:
            y = part if s is None else widen.scale_outer(part, None, s, gd)  # in place
        elif s is None:
            y[:, a:b] = part
        else:
            torch.mul(part, s[a:b], out=y[:, a:b])
    y = y if y.dtype == dtype else y.to(dtype)
    return y if bias is None else y + bias


class Int8WeightOnly:
    """W8A16: int8 weights with per-output-channel scales: our decode kernel (trtserve/kernels/dense.py)
    for decode rows, slabs for float32 prefill and for bf16 prefill where torch's bf16 GEMM is native,
    torch's int8 weight-pack GEMM for the rest or where the kernel cannot be built. A decode step that
    runs whole in trtserve/kernels/decode_layers.c reads `weight` and `scale_f32` there, for every
    activation dtype."""

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
        if y is None and x.dim() == 2 and (x.dtype == torch.float32 or _native_prefill(x)):
            # float32 rows past the decode kernel's (prefill): torch's int8 kernel runs float32
            # inputs far slower than a float32 GEMM over widened slabs. Equal to that kernel's
            # result up to float32 summation order. bf16 prefill on a CPU with bf16 matmul
            # instructions: int8 values are exact in bf16, so the slab runs torch's native bf16 GEMM
            # (faster than torch's int8 kernel there); its output is rounded to
            # bf16 before the per-channel scale, one bf16 rounding more than that kernel's.
            y = slab_linear(x, x.dtype, self.widen_rows, self.weight.shape[0], self.scale_f32)
        if y is None:
            y = torch._weight_int8pack_mm(x.contiguous(), self.weight, self.scale)
        return y if bias is None else y + bias

    def widen_rows(self, a: int, b: int, out: torch.Tensor) -> None:
        out.copy_(self.weight[a:b])  # torch's int8 -> float32 conversion is vectorized


class Int4Groupwise:
    """W4A16(_AWQ): packed int4 with per-group scales, repacked once into torch's CPU int4 layout.
    Every float32 input (torch's kernel runs those far slower) and, on AVX2 builds of torch,
    bf16 decode rows go to our AVX2 kernel over that same pack (trtserve/kernels/int4.py,
    `preferred`); float32 prefill rows, and bf16 ones on a CPU with bf16 matmul instructions, to
    widened slabs (slab_linear); the rest, or everything where our kernels cannot be built, to
    torch's int4 GEMM. AWQ's pre-quant scale (where the export did
    not fold it into the norm) is applied to the input. A decode step that runs whole in
    trtserve/kernels/decode_layers.c reads `packed` and `scales_zeros` there, for the rows `ours` says."""

    int4_groupwise = True  # what trtserve/kernels/decode_layers.py looks for (it imports no model code)

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        w = unpack_int4_rows(t["weight"])  # (out, in) in [-8, 7]
        self.out_features = w.shape[0]
        self.group_size = group_size
        self.packed = torch._convert_weight_to_int4pack_for_cpu((w.int() + 8).contiguous(), 1)
        scale = t["weights_scaling_factor"].float()  # (out, in / group)
        # torch's kernel computes (q - 8) * scale + zero per group: zero = 0 for symmetric int4; GGUF's
        # Q4_1 / Q4_K carry theirs (build/gguf_blocks.py)
        zero = t["zero"].float() if "zero" in t else torch.zeros_like(scale)  # (out, in / group)
        self.scales_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous()
        self._zeros = bool(zero.any())
        pqs = t.get("prequant_scaling_factor")
        self.pre_quant = None if pqs is None else pqs.to(dtype)  # (in,)
        self.kernel = int4_kernel.supports(dtype, self.out_features)
        self._scales_f32: torch.Tensor | None = None  # widen_rows' (in / group, out), made on first use
        # Decode rows' activations rounded to int8 per group (RuntimeConfig.int8_activations; the
        # model sets it where int4.int8_activations_available())
        self.int8_activations = False

    def widen_rows(self, a: int, b: int, out: torch.Tensor) -> None:
        """Rows a:b of (int4 x group scale), exact in float32 or rounded to bf16, from the pack."""
        if self._scales_f32 is None:
            self._scales_f32 = self.scales_zeros[..., 0].float().contiguous()  # the scales' exact values
        widen.widen_int4pack(
            self.packed, self.out_features, int4_kernel.block_n(), a, self._scales_f32, self.group_size, out
        )
        if self._zeros:  # (rows, in / group, group) += each group's zero
            out.unflatten(1, (-1, self.group_size)).add_(self.scales_zeros[:, a:b, 1].t().to(out.dtype)[..., None])

    def ours(self, dtype: torch.dtype, rows: int) -> bool:
        """Whether `rows` CPU input rows of `dtype` (after the pre-quant scale) go to our int4 kernel
        (not torch's, nor float32 slabs)."""
        slabs = dtype == torch.float32 and rows >= _INT4_SLAB_ROWS
        ok = self.kernel and dtype == self.scales_zeros.dtype and not slabs
        return ok and int4_kernel.preferred(dtype, rows, self.int8_activations)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_quant is not None:
            x = x * self.pre_quant
        x = x.contiguous()
        if (
            self.kernel
            and x.dim() == 2
            and x.shape[0] >= _INT4_SLAB_ROWS
            and (x.dtype == torch.float32 or _native_prefill(x))
        ):
            # float32 prefill: our int4 kernel is a decode kernel; widened slabs run at the dense
            # GEMM's rate. bf16 prefill on a
            # CPU with bf16 matmul instructions: the slab's int4 x scale values are rounded to bf16,
            # the activation dtype (GPU weight-only GEMMs such as TensorRT-LLM's fpA_intB hold their
            # scales in it; their exact rounding is not checked here), and run torch's native bf16
            # GEMM, which torch's int4 kernel falls well short of.
            return slab_linear(x, x.dtype, self.widen_rows, self.out_features, bias=bias, k_major=True)
        y = None
        if x.device.type == "cpu" and self.ours(x.dtype, x.shape[0]):
            y = int4_kernel.int4_gemm(x, self.packed, self.scales_zeros, self.group_size, self.int8_activations)
        if y is None:
            y = torch._weight_int4pack_mm_for_cpu(x, self.packed, self.group_size, self.scales_zeros)
        return y if bias is None else y + bias


class Int4Fp8Awq:
    """W4A8_AWQ: int4 weights whose group-dequantized values ModelOpt rounds through e4m3 with the
    global scale (w = e4m3(int4 x group scale / scale_2) x scale_2), so they are not int4 x scale and
    the int4 GEMM cannot run them: the packed weights are widened a slab per call (slab_linear).
    Activations: pre-quant scale, then e4m3 rounding with the calibrated scale."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.packed = t["weight"].contiguous()  # (out / 2, in) int4 pairs
        self.scale = t["weights_scaling_factor"].float().contiguous()  # (out, in / group)
        mult = _FP8_MAX / (t["weights_scaling_factor_2"].float() * _FP8_MAX)  # (1,)
        self.weight_fq = (mult, 1 / mult)  # the weights' e4m3 rounding, as _fp8_fake_quant's
        pqs = t.get("prequant_scaling_factor")
        self.pre_quant = None if pqs is None else pqs.to(dtype)
        self.act_scale = t["activation_scaling_factor"].float()

    def widen_rows(self, a: int, b: int, out: torch.Tensor, dtype: torch.dtype) -> None:
        """Rows a:b (a, b even) of the weight, rounded to `dtype`, into out (float32)."""
        packed = self.packed[a // 2 : b // 2]
        widen.widen_nibbles(packed, widen.ROWS_PACKED, widen.INT4, self.scale[a:b], self.weight_fq, dtype, out)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_quant is not None:
            x = x * self.pre_quant
        rows = partial(self.widen_rows, dtype=x.dtype)
        return slab_linear(_fp8_fake_quant(x, self.act_scale), x.dtype, rows, self.scale.shape[0], bias=bias)


class Int8SmoothQuant:
    """W8A8_SQ_PER_CHANNEL: the smoothed input quantized to int8 per token (dynamic scale = the
    token's amax / 127, as TensorRT-LLM's per-token SmoothQuant plugin does), times int8 weights
    with per-channel scales. The checkpoint's calibrated per-tensor activation scale stays in the
    file for TensorRT-LLM; it costs far more perplexity than per-token scales (docs/performance.md).

    The product runs as an fp32 GEMM on the int8 values (exact for the sums that occur: fp32 holds
    integers to 2**24), the weight widened a slab at a time (slab_linear) or, for decode rows, read
    as int8 by the decode kernel: torch's CPU `torch._int_mm` is far slower than an fp32 GEMM without
    AMX. Where the CPU has AMX-INT8, prefill rows run `torch._int_mm` (exact int32 sums), faster than
    the dense float32 GEMM (docs/performance.md). Weights stay int8 in memory."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.weight = t["weight"].contiguous()  # (out, in) int8
        self.w_scale = t["weights_scaling_factor"].float()  # (out,)
        pqs = t.get("prequant_scaling_factor")
        self.pre_quant = None if pqs is None else pqs.to(dtype)

    def widen_rows(self, a: int, b: int, out: torch.Tensor) -> None:
        out.copy_(self.weight[a:b])  # torch's int8 -> float32 conversion is vectorized

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_quant is not None:
            x = x * self.pre_quant
        xq, tok_scale = widen.int8_round(x)  # (T, in) int8 values in float32, (T, 1)
        # Decode rows: our int8 kernel (trtserve/kernels/dense.py) reads the int8 weight directly.
        y = dense.gemm(xq, self.weight) if dense.usable(xq, self.weight) else None  # (T, out)
        if y is None and xq.device.type == "cpu" and dense.native_matmul(torch.int8):
            y = torch._int_mm(xq.to(torch.int8), self.weight.t())  # int32 sums
        if y is None:
            y = slab_linear(xq, torch.float32, self.widen_rows, self.weight.shape[0])
        y = widen.scale_outer(y, tok_scale, self.w_scale, x.dtype)
        return y if bias is None else y + bias


class Fp8Linear:
    """FP8 (per-tensor weight and activation scales) and FP8_PER_CHANNEL_PER_TOKEN (per-channel
    weight scales, dynamic per-token activation scales): e4m3 storage, widened a slab per call
    (slab_linear); a per-tensor scale is folded into the byte -> value table."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.weight = t["weight"].contiguous()  # (out, in) float8_e4m3fn
        # (out,) for FP8_PER_CHANNEL_PER_TOKEN, and for FP8 where fused q/k/v (gate/up) keep their
        # own per-tensor scales; (1,) otherwise.
        scale = t.get("per_channel_scale", t.get("weights_scaling_factor"))
        self.per_channel = scale.numel() > 1
        self.w_scale = scale.float()
        act = t.get("activation_scaling_factor")
        self.act_scale = None if act is None else act.float()
        self._luts: dict[torch.dtype, torch.Tensor | None] = {}

    def lut(self, dtype: torch.dtype) -> torch.Tensor | None:
        """Byte -> weight value in `dtype` (as float32) with the per-tensor scale applied by torch's own
        multiply, so each equals `weight.to(dtype) * scale.to(dtype)`; None: per-channel (the scale
        goes on the GEMM's output, and e4m3 values are exact in every float dtype)."""
        if dtype not in self._luts and not self.per_channel:
            self._luts[dtype] = (widen.E4M3.to(self.w_scale.device, dtype) * self.w_scale.to(dtype)).float()
        return self._luts.get(dtype)

    def widen_rows(self, a: int, b: int, out: torch.Tensor, lut: torch.Tensor | None = None) -> None:
        widen.widen_bytes(self.weight[a:b], lut, out)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        xq = _fp8_fake_quant(x, self.act_scale)  # act_scale None: per token, max(amax, 2^-24) / 448
        rows = partial(self.widen_rows, lut=self.lut(x.dtype))
        scale = self.w_scale if self.per_channel else None
        return slab_linear(xq, x.dtype, rows, self.weight.shape[0], scale, bias)


class Nvfp4Linear:
    """NVFP4: E2M1 weights with fp8 scales per 16 inputs and a global scale, widened a slab per call
    (slab_linear). Activations stay in the model dtype (no fp4 compute on CPU)."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
        self.weight = t["weight"].contiguous()  # (out, in / 2) uint8
        self.block_scale = t["weights_scaling_factor"].contiguous()  # (out, in / 16) float8_e4m3fn
        self.global_scale = t["weights_scaling_factor_2"].float()  # (1,)

    def widen_rows(self, a: int, b: int, out: torch.Tensor, dtype: torch.dtype) -> None:
        """Rows a:b of E2M1 x (block scale x global scale), rounded to `dtype`, into out (float32)."""
        scales = (self.block_scale[a:b], widen.E4M3, float(self.global_scale))
        widen.widen_nibbles(self.weight[a:b], widen.INPUTS_PACKED, widen.E2M1, scales, None, dtype, out)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = partial(self.widen_rows, dtype=x.dtype)
        return slab_linear(x, x.dtype, rows, self.weight.shape[0], bias=bias)


def mixed_linear(t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int = 128):
    """MIXED_PRECISION (a GGUF's own quantization, build/gguf_linears.py): each linear in its own
    format, told by its tensors: int4 with per-group scales (and zeros), int8 with per-row scales, or
    a plain (out, in) weight, which the decoder runs as it runs unquantized ones."""
    w, scale = t["weight"], t.get("weights_scaling_factor")
    if scale is None:
        return w.to(dtype)
    if scale.dim() == 2:  # (out, in / group)
        return Int4Groupwise(t, dtype, w.shape[1] // scale.shape[1])
    return Int8WeightOnly(t, dtype)


def make_linear(t: dict[str, torch.Tensor], algo: str, dtype: torch.dtype, group_size: int = 128):
    """The kernel object for one quantized linear (`t`: its tensors by TensorRT-LLM suffix), as the
    format's spec names it; ValueError for a quant_algo no spec is registered for."""
    return quant_format(algo).kernel()(t, dtype, group_size)
