"""LoRA adapters on the torch engine's fused linears: PEFT's tensors in, one (A, B) per engine linear out.

PEFT stores, for each targeted HF module (`model.layers.{i}.self_attn.q_proj` ...), `lora_A.weight`
(r, in) and `lora_B.weight` (out, r); the module's output gains scaling * B·A·x. The engine fuses
modules (qkv = [q; k; v], fc_gate = [gate_proj; up_proj]: models/layout.py), so each engine linear
gets one A stacking its targeted parts' A's (sum r, in) and one B placing each part's B, scaled,
in that part's output rows and its own rank columns (out, sum r), zero elsewhere, kept as Bᵀ (sum r, out). Then one
x·Aᵀ·Bᵀ per linear per adapter adds every part's update exactly where its module's output lies. A module the
checkpoint stores fused (Phi-3's qkv_proj: Names.fused) is one part, its B spanning all its roles' rows.

The names come from the family spec (HF names by source role, the layout's fusions), never from
strings here; every tensor of the file is used exactly once and every shape is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from trtserve.engine.adapters import ADAPTER_WEIGHTS, AdapterRef, read_peft_config
from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.models.family import DecoderFamily
from trtserve.models.vision_family import TEXT, VisionFamily

PEFT_PREFIX = "base_model.model."  # PeftModel's prefix on the base model's module names


@dataclass(frozen=True)
class LoraLinear:
    a: torch.Tensor  # (sum r, in) the targeted parts' A's, stacked
    bt: torch.Tensor  # (sum r, out) Bᵀ: each part's B times the scaling, in its output columns; zero elsewhere


@dataclass(eq=False)  # compared and hashed by identity: one load of one adapter
class LoraWeights:
    """One adapter's updates, per layer, by engine linear role (qkv, dense, fc_gate, proj); a linear
    no module of which is targeted is absent."""

    ref: AdapterRef
    rank: int
    targets: tuple[str, ...]  # the HF modules it targets (short names: q_proj ...), in layout order
    layers: list[dict[str, LoraLinear]]

    @property
    def nbytes(self) -> int:
        return sum(t.a.nbytes + t.bt.nbytes for layer in self.layers for t in layer.values())


def engine_parts(family: DecoderFamily) -> dict[str, tuple[str, ...]]:
    """Each engine linear role -> the source roles (HF modules) concatenated into it along the out dim."""
    lay = family.layout
    fused = {p for t in lay.engine_layer.values() for p in t.parts}
    parts = {r: t.parts for r, t in lay.trtllm_layer.items() if t.linear and r not in fused}
    for role, t in lay.engine_layer.items():
        parts[role] = tuple(s for p in t.parts for s in lay.trtllm_layer[p].parts)
    return parts


def module_names(family: DecoderFamily, mlp: bool = False) -> dict[str, str]:
    """Source role of each targetable linear -> PEFT's short name of its HF module (q_proj ...). In a family
    with experts (models/moe.py) only modules every layer has: adapters on an MLP are refused. mlp: the
    modules of the MLP and experts instead (none in a dense family)."""
    lay = family.layout
    return {
        s: family.hf.layer[s].rsplit(".", 1)[-1]
        for ps in engine_parts(family).values()
        for s in ps
        if (lay.layer[s].mlp is not None) == mlp
    }


def load_lora(
    ref: AdapterRef,
    path: Path,
    family: DecoderFamily,
    cfg: ModelConfig,
    max_rank: int,
    dtype: torch.dtype,
    device: torch.device,
    vision: VisionFamily | None = None,
) -> LoraWeights:
    """Read the PEFT adapter at `path` for this engine; UserError (one sentence: what does not fit and
    how to fix it) where its rank, target modules, layers or shapes do not match the base model. vision: a
    vision-language model's family, whose adapters name its language model's modules under its prefixes."""
    peft = read_peft_config(path)
    if peft.rank > max_rank:
        raise UserError(
            f"LoRA adapter {ref.name} has rank {peft.rank}, above max_lora_rank {max_rank}; "
            f"raise the engine's lora.max_lora_rank to at least {peft.rank}"
        )
    short = module_names(family)
    base = f" (trained for {peft.base_model})" if peft.base_model else ""
    _check_targets(ref.name, peft.target_modules, family, set(short.values()), base)
    try:
        tensors = load_file(str(path / ADAPTER_WEIGHTS))
    except (SafetensorError, OSError) as err:
        raise UserError(f"LoRA adapter {ref.name}: {ADAPTER_WEIGHTS} cannot be read ({err}); save it again") from None
    if vision is not None:
        tensors = _language_model_tensors(ref.name, tensors, vision)
    where = {}  # PEFT tensor name -> (layer, source role, "A" | "B")
    for i in range(cfg.num_hidden_layers):
        for role in short:
            for ab in "AB":
                where[f"{PEFT_PREFIX}{family.hf.module(role, i)}.lora_{ab}.weight"] = (i, role, ab)
    unknown = sorted(set(tensors) - where.keys())
    mlp = {family.hf.layer[r].split(".")[0] for r, s in family.layout.layer.items() if s.mlp}  # "mlp" ...
    if unknown and any(f".{m}." in unknown[0] for m in mlp):  # a family with experts (models/moe.py)
        _refuse_experts(ref.name, f"holds {unknown[0]}", family, short.values())
    if unknown:
        raise UserError(
            f"LoRA adapter {ref.name}{base} holds {unknown[0]}, which is none of the {', '.join(short.values())} "
            f"of this {family.name} model's {cfg.num_hidden_layers} layers; serve it on the base model it was trained for"
        )
    if not tensors:
        raise UserError(f"LoRA adapter {ref.name} holds no LoRA tensors; save the trained adapter again with PEFT")
    layers = [
        _layer(ref.name, i, tensors, family, cfg, peft.rank, peft.scaling, dtype, device, base)
        for i in range(cfg.num_hidden_layers)
    ]
    found = {short[role] for (_, role, _) in (where[n] for n in tensors)}
    targets = tuple(m for m in dict.fromkeys(short.values()) if m in found)
    return LoraWeights(ref, peft.rank, targets, layers)


def _language_model_tensors(
    name: str, tensors: dict[str, torch.Tensor], vision: VisionFamily
) -> dict[str, torch.Tensor]:
    """A vision-language adapter's tensors under the text model's names; UserError for one on the vision part."""
    out = {}
    for key, t in tensors.items():
        target = vision.target(key.removeprefix(PEFT_PREFIX))
        if target is not None and not target.startswith(TEXT):  # the tower, the projector or the LM head
            raise UserError(
                f"LoRA adapter {name} holds {key}, outside the {vision.name} model's language model (its vision tower, "
                "projector or head); trtserve applies adapters to the language model only: train it with target_modules "
                r"matching the language model's modules alone (e.g. r'.*language_model.*\.(q_proj|v_proj)')"
            )
        out[PEFT_PREFIX + target if target is not None else key] = t
    return out


def _refuse_experts(name: str, what: str, family: DecoderFamily, known) -> NoReturn:
    raise UserError(
        f"LoRA adapter {name} {what}, but adapters on the MLP and experts of {family.name} "
        f"models are not supported; train it with target_modules among {', '.join(known)}"
    )


def _check_targets(
    name: str, targets: tuple[str, ...] | str, family: DecoderFamily, known: set[str], base: str
) -> None:
    if isinstance(targets, str):  # PEFT's regex over full module names: the tensors say what it matched
        return
    other = sorted({t.rsplit(".", 1)[-1] for t in targets} - known)
    experts = set(module_names(family, mlp=True).values())
    if other and experts.intersection(other):  # a family with experts (models/moe.py)
        _refuse_experts(name, f"targets {', '.join(sorted(experts.intersection(other)))}", family, sorted(known))
    if other:
        raise UserError(
            f"LoRA adapter {name}{base} targets {', '.join(other)}; trtserve applies adapters to "
            f"{', '.join(sorted(known))} only: train it with target_modules among those"
        )


def _layer(
    name: str,
    i: int,
    tensors: dict[str, torch.Tensor],
    family: DecoderFamily,
    cfg: ModelConfig,
    rank: int,
    scaling: float,
    dtype: torch.dtype,
    device: torch.device,
    base: str,
) -> dict[str, LoraLinear]:
    out: dict[str, LoraLinear] = {}
    lay = family.layout
    for role, parts in engine_parts(family).items():
        a_parts, placed, row = [], [], 0
        total_out = sum(lay.layer[s].weight_shape(cfg)[0] for s in parts)
        modules: dict[str, list[int]] = {}  # HF module -> [its first out row, its rows, in]: a fused one spans parts
        for s in parts:
            n_out, n_in = lay.layer[s].weight_shape(cfg)
            m = modules.setdefault(family.hf.module(s, i), [row, 0, n_in])
            assert m[0] + m[1] == row, f"{role}: a fused module's parts are not adjacent in the engine linear"
            m[1] += n_out
            row += n_out
        for module, (first, n_out, n_in) in modules.items():
            a = tensors.get(f"{PEFT_PREFIX}{module}.lora_A.weight")
            b = tensors.get(f"{PEFT_PREFIX}{module}.lora_B.weight")
            if (a is None) != (b is None):
                raise UserError(f"LoRA adapter {name} has only one of lora_A and lora_B for {module}; save it again")
            if a is not None:
                for what, t, want in (("lora_A", a, (rank, n_in)), ("lora_B", b, (n_out, rank))):
                    if tuple(t.shape) != want:
                        raise UserError(
                            f"LoRA adapter {name}{base}: {module}.{what} is {tuple(t.shape)} where this base model "
                            f"with r={rank} needs {want}; serve it on the base model it was trained for"
                        )
                a_parts.append(a)
                placed.append((first, b))
        if not a_parts:
            continue
        bt = torch.zeros(rank * len(a_parts), total_out, dtype=torch.float32)  # (sum r, out)
        for k, (r0, b) in enumerate(placed):
            bt[k * rank : (k + 1) * rank, r0 : r0 + b.shape[0]] = b.float().t() * scaling
        out[role] = LoraLinear(
            a=torch.cat(a_parts).to(dtype=dtype, device=device).contiguous(),
            bt=bt.to(dtype=dtype, device=device).contiguous(),
        )
    return out
