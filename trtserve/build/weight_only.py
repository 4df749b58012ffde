"""`--quant w8a16` / `w4a16` for models ModelOpt 0.47 cannot export (families with experts: its HF
export expects transformers' fused experts and fails on them): weight-only formats need no calibration,
so the build rounds each linear's weight itself, with ModelOpt's math, into the tensors the ModelOpt
path writes (quant/convert.py) and the same run-time linears read (models/quantized.py):

    w8a16   int8 per output row: scale = amax / 127, q = round(w / scale)           weight, weights_scaling_factor (out,)
    w4a16   int4 per group of inputs: scale = amax / 7, q = round(w / scale) in [-8, 7], packed two rows a byte
            (build/gguf_blocks.py's pack_int4)                                      weight, weights_scaling_factor (out, in / group)

Every layer linear is rounded, each expert's gate/up/down on its own (stacked experts keep their leading
expert dim); the router, a shared expert's gate, norms, the embedding and lm_head stay float, as ModelOpt
keeps them. The converter's plan (build/convert.py) is made as for any build and its linears' weight
specs replaced, as --quant gguf does (build/gguf_linears.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch

from trtserve.build.gguf_blocks import Int8Rows, pack_int4
from trtserve.build.gguf_linears import Kept
from trtserve.build.planner import BuildPlan
from trtserve.build.safetensors_io import TensorSpec
from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig, Quantization
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.layout import Layout
from trtserve.models.moe import EXPERT_LINEARS
from trtserve.models.quant_formats import by_name, resolve

Rounding = Callable[[torch.Tensor, int], dict[str, torch.Tensor]]  # (w (..., out, in) float32, group) -> tensors


def int8_rows(w: torch.Tensor, group_size: int) -> dict[str, torch.Tensor]:
    """W8A16 (ModelOpt's INT8_WEIGHT_ONLY_CFG): int8 with each output row's amax / 127 as its scale."""
    r = Int8Rows.round(w)
    return {"weight": r.q, "weights_scaling_factor": r.scale}


def int4_groups(w: torch.Tensor, group_size: int) -> dict[str, torch.Tensor]:
    """W4A16 (ModelOpt's INT4_BLOCKWISE_WEIGHT_ONLY_CFG): symmetric int4 with each group's amax / 7 as its scale."""
    groups = w.unflatten(-1, (-1, group_size))  # (..., out, in / group, group)
    scale = groups.abs().amax(dim=-1).clamp_min(torch.finfo(torch.float32).tiny) / 7  # (..., out, in / group)
    q = (groups / scale[..., None]).round().clamp(-8, 7).flatten(-2)  # (..., out, in)
    return {"weight": pack_int4(q + 8), "weights_scaling_factor": scale}


def rounded(plan: BuildPlan) -> Kept | None:
    """The rewrite of a --quant whose recipe has a rounding, for a model with experts; None otherwise
    (ModelOpt quantizes). UserError for what the rounding cannot do without ModelOpt's calibration."""
    quant = plan.config.quant
    if not quant or plan.model.moe is None:
        return None
    spec, recipe = by_name(quant)
    if recipe.rounding is None:
        return None
    if plan.config.kv_cache_quant:
        raise UserError(
            f"--kv-cache-quant needs ModelOpt's calibration, which --quant {quant} does not run for "
            f"{plan.reader.family.name} models; drop --kv-cache-quant"
        )
    q = Quantization(**plan.quantization, exclude_modules=["lm_head", "*mlp.router", "*mlp.shared_expert_gate"])
    model = plan.model.model_copy(update={"quantization": q})
    names = linear_weights(plan.reader.family.layout, model)
    group, dt = spec.block_for(plan.config.group_size), TORCH_DTYPES[model.dtype]
    return Kept(model, partial(_rewrite, names=names, rounding=resolve(recipe.rounding), group=group, dt=dt))


def linear_weights(layout: Layout, cfg: ModelConfig) -> frozenset[str]:
    """The checkpoint's and the engine's weight names the format rounds: each layer linear and each
    expert's projections, as TensorRT-LLM's modules and as the engine fuses them (fc_gate)."""
    roles = {r for r, t in layout.trtllm_layer.items() if t.linear or r in EXPERT_LINEARS}
    modules = {layout.trtllm_layer[r].name for r in roles}
    modules |= {t.name for t in layout.engine_layer.values() if set(t.parts) <= roles}
    prefixes = [layout.trtllm_prefix.format(i=i) for i in range(cfg.num_hidden_layers)]
    return frozenset(f"{p}{m}.weight" for p in prefixes for m in modules)


def _rewrite(
    spec: TensorSpec, names: frozenset[str], rounding: Rounding, group: int, dt: torch.dtype
) -> list[TensorSpec]:
    """The specs replacing one plan spec: itself, or a linear's rounded tensors (shapes from a meta run)."""
    if spec.name not in names:
        return [spec]
    module = spec.name[: -len(".weight")]
    make = _Rounded(spec, rounding, group, dt)
    shapes = rounding(torch.empty(spec.shape, device="meta"), group)
    return [
        TensorSpec(
            f"{module}.{sfx}",
            tuple(t.shape),
            dt if t.dtype.is_floating_point else t.dtype,
            lambda sfx=sfx: make(sfx),
            spec.sources if sfx == "weight" else (),
        )
        for sfx, t in shapes.items()
    ]


@dataclass
class _Rounded:
    """One linear's rounded tensors, computed once for the specs that write them (and dropped after);
    scales are stored in the model dtype, which the run-time linears compute in."""

    spec: TensorSpec
    rounding: Rounding
    group: int
    dtype: torch.dtype
    _left: dict[str, torch.Tensor] = field(default_factory=dict)

    def __call__(self, suffix: str) -> torch.Tensor:
        if not self._left:
            out = self.rounding(self.spec.make().float(), self.group)
            self._left = {k: v.to(self.dtype) if v.dtype.is_floating_point else v for k, v in out.items()}
        return self._left.pop(suffix)
