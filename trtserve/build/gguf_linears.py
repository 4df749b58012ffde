"""`--quant gguf` (the default for a quantized GGUF, build/gguf_default.py): a GGUF file's linears
kept at their quantized size (quant_algo MIXED_PRECISION).

The converter's plan (build/convert.py) is made as for any build; each linear's weight spec is then
replaced by the tensors of the packed format nearest the GGUF types of its sources (fused ones
included, e.g. q/k/v), read from the file's blocks (build/gguf_blocks.py):

    all parts Q4_0 / Q4_1 / Q4_K   W4A16 with zero points, groups of 32: weight, weights_scaling_factor, zero
    any F32 / F16 / BF16 part      dense, as without --quant
    otherwise (Q8_0, Q5_*, Q6_K)   W8A16: weight (int8), weights_scaling_factor (per row)

The embedding, a separate lm_head and the norms stay dense in the engine dtype (the decoder reads
the embedding by row and the lm_head as a dense GEMM); docs/quantization.md has what that costs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch

from trtserve.build.gguf_blocks import DENSE_TYPES, GROUP, INT4_TYPES, KEPT_TYPES, Int8Rows, pack_int4
from trtserve.build.gguf_reader import GGUFReader
from trtserve.build.planner import BuildPlan
from trtserve.build.safetensors_io import TensorSpec
from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig, Quantization
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.quant_formats import by_name

_USE = re.compile(r"(?P<name>.+)\[(?P<a>\d+):(?P<b>\d+)\]")  # convert._use's "name[a:b]" of a fused source


@dataclass(frozen=True)
class Kept:
    """The model as built and the rewrite of a plan's specs: identity unless --quant keeps the source's
    quantization (here) or rounds the weights without ModelOpt (build/weight_only.py)."""

    model: ModelConfig
    rewrite: Callable[[TensorSpec], list[TensorSpec]] | None = None  # one plan spec -> its replacements

    def specs(self, specs: list[TensorSpec]) -> list[TensorSpec]:
        if self.rewrite is None:
            return specs
        return [out for s in specs for out in self.rewrite(s)]


def kept(plan: BuildPlan) -> Kept:
    """What the plan keeps of its source's quantization; UserError (before anything is written) for
    a source or model --quant gguf cannot keep, naming the tensor and type where that is why."""
    if not plan.config.quant or by_name(plan.config.quant)[0].source != "gguf":
        return Kept(plan.model)
    reader = plan.reader
    if not isinstance(reader, GGUFReader):
        raise UserError(
            f"--quant gguf keeps a GGUF file's own quantization, but {reader.path} is not a GGUF file; "
            "give a .gguf file, or pick a ModelOpt format such as --quant w4a16"
        )
    if plan.model.moe is not None:
        raise UserError("--quant gguf does not build mixture-of-experts models yet; build with --quant none")
    for name, (kind, _) in reader.tensor_bytes().items():
        if kind not in {t.name for t in KEPT_TYPES}:
            raise UserError(
                f"GGUF tensor {name} has type {kind}, which --quant gguf cannot keep; build with --quant none "
                "(weights are then dequantized) or re-quantize the file to Q4_0, Q4_1, Q4_K, Q5_K, Q6_K or Q8_0"
            )
    model = plan.model.model_copy(update={"quantization": Quantization(quant_algo="MIXED_PRECISION")})
    return Kept(model, partial(_rewrite, reader=reader, dt=TORCH_DTYPES[model.dtype]))


def _parts(spec: TensorSpec) -> list[tuple[str, slice]]:
    """The spec's source tensors, each with the rows of it that the spec uses, in order."""
    out = []
    for use in spec.sources:
        m = _USE.fullmatch(use)
        out.append((use, slice(None)) if m is None else (m["name"], slice(int(m["a"]), int(m["b"]))))
    return out


def _is_linear(spec: TensorSpec) -> bool:
    """A layer's linear weight: 2-D, sourced, and none of the model-level tensors (embedding, lm_head)."""
    return spec.name.endswith(".weight") and len(spec.shape) == 2 and ".layers." in spec.name and bool(spec.sources)


def _rewrite(spec: TensorSpec, reader: GGUFReader, dt: torch.dtype) -> list[TensorSpec]:
    """The specs replacing one plan spec: itself, or a linear's quantized tensors."""
    if not _is_linear(spec):
        return [spec]
    parts = _parts(spec)
    types = {reader.ggml_type(name) for name, _ in parts}
    if types & DENSE_TYPES:
        return [spec]
    module, (out, n) = spec.name[: -len(".weight")], spec.shape
    make = _Producer(reader, parts, int4=types <= INT4_TYPES, dtype=dt)
    if make.int4:
        shapes = {"weight": ((out // 2, n), torch.int8), "weights_scaling_factor": ((out, n // GROUP), dt)}
        shapes["zero"] = ((out, n // GROUP), dt)
    else:
        shapes = {"weight": ((out, n), torch.int8), "weights_scaling_factor": ((out,), dt)}
    return [
        TensorSpec(f"{module}.{sfx}", shape, dtype, lambda sfx=sfx: make(sfx), spec.sources if sfx == "weight" else ())
        for sfx, (shape, dtype) in shapes.items()
    ]


@dataclass
class _Producer:
    """One linear's quantized tensors, read once for the specs that write them (and dropped after)."""

    reader: GGUFReader
    parts: list[tuple[str, slice]]
    int4: bool
    dtype: torch.dtype
    _left: dict[str, torch.Tensor] = field(default_factory=dict)

    def __call__(self, suffix: str) -> torch.Tensor:
        if not self._left:
            self._left = self._read()
        return self._left.pop(suffix)

    def _read(self) -> dict[str, torch.Tensor]:
        if self.int4:
            rows = [self.reader.load_int4(name) for name, _ in self.parts]
            cat = lambda f: torch.cat([getattr(r, f)[s] for r, (_, s) in zip(rows, self.parts, strict=True)])  # noqa: E731
            scale, zero = cat("scale").to(self.dtype), cat("zero").to(self.dtype)
            return {"weight": pack_int4(cat("q")), "weights_scaling_factor": scale, "zero": zero}
        w = torch.cat([self.reader.load(name)[s] for name, s in self.parts])  # (out, in) float32
        r = Int8Rows.round(w)
        return {"weight": r.q, "weights_scaling_factor": r.scale.to(self.dtype)}
