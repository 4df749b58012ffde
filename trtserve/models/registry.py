"""Architecture name -> decoder family. The engine never imports a family by name; a new family is
one `DecoderFamily` passed to `register_family`."""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.models import (
    gemma2,
    gemma3,
    gpt_oss,
    granite,
    llama,
    mistral,
    mixtral,
    olmoe,
    phi3,
    qwen2,
    qwen2_moe,
    qwen3,
    qwen3_moe,
    smollm3,
)
from trtserve.models.family import DecoderFamily
from trtserve.models.features import CONFIG_FIELDS, MOE

_FAMILIES: dict[str, DecoderFamily] = {}  # by name, in registration order


def register_family(fam: DecoderFamily) -> None:
    """Add a family; ValueError if its spec is incomplete or a name or architecture is taken.
    Families sharing a TensorRT-LLM architecture must agree on what an engine of it computes."""
    problems = _spec_problems(fam)
    for other in _FAMILIES.values():
        if other.name == fam.name:
            problems.append(f"the name {fam.name!r} is taken")
        problems += [f"{a} is {other.name}'s" for a in fam.hf_architectures if a in other.hf_architectures]
        if (
            fam.gguf
            and other.gguf
            and fam.gguf.arch == other.gguf.arch
            and (MOE in fam.features) == (MOE in other.features)
        ):
            problems.append(f"GGUF architecture {fam.gguf.arch!r} is {other.name}'s")  # one with experts may share it
        same = (fam.layout, fam.features) == (other.layout, other.features)
        if fam.trtllm_architecture == other.trtllm_architecture and not same:
            problems.append(f"it shares {fam.trtllm_architecture} with {other.name} but not its layout and features")
    if problems:
        raise ValueError(f"cannot register family {fam.name!r}: {'; '.join(problems)}")
    _FAMILIES[fam.name] = fam


def unregister_family(name: str) -> None:
    del _FAMILIES[name]


def _spec_problems(fam: DecoderFamily) -> list[str]:
    names = {"HF": fam.hf} | ({"GGUF": fam.gguf.names} if fam.gguf else {})
    problems = [
        f"its {fmt} names do not cover the layout's roles exactly"
        for fmt, n in names.items()
        if n.model.keys() != fam.layout.model.keys() or n.layer.keys() != fam.layout.layer.keys()
    ]
    problems += [f"its {fmt} layer prefix lacks {{i}}" for fmt, n in names.items() if "{i}" not in n.layer_prefix]
    problems += [
        f"its {fmt} fused module {m} does not name exactly the roles {', '.join(roles)}"
        for fmt, n in names.items()
        for m, roles in n.fused.items()
        if sorted(roles) != sorted(r for r, name in n.layer.items() if name == m)
        or len({fam.layout.layer[r].bias for r in roles if r in fam.layout.layer}) > 1
    ]
    lay = fam.layout
    problems += [
        f"the parts of {t.name} differ in their bias"
        for t in lay.trtllm_layer.values()
        if len({lay.layer[p].bias for p in t.parts}) > 1
    ]
    if not fam.config_features <= CONFIG_FIELDS.keys():
        problems.append(f"config.json cannot turn on {sorted(fam.config_features - CONFIG_FIELDS.keys())}")
    return problems


def supported() -> str:
    return ", ".join(sorted(a for fam in _FAMILIES.values() for a in fam.hf_architectures))


def family_for_hf(architectures: list[str] | None, model_type: str | None = None) -> DecoderFamily:
    for arch in architectures or []:
        for fam in _FAMILIES.values():
            if arch in fam.hf_architectures:
                return fam
    if not architectures and model_type in _FAMILIES:
        return _FAMILIES[model_type]
    got = ", ".join(architectures or []) or model_type or "none given"
    raise UserError(f"architecture {got} is not supported; trtserve builds: {supported()}")


def family_for_gguf(arch: str, experts: bool = False) -> DecoderFamily:
    """The family of a GGUF file of `arch`; experts: the file has experts (llama.cpp writes Mixtral as
    `llama` with an expert count), which picks the family with experts among those of one arch."""
    fams = [fam for fam in _FAMILIES.values() if fam.gguf and fam.gguf.arch == arch]
    for fam in sorted(fams, key=lambda f: (MOE in f.features) != experts):
        return fam
    known = ", ".join(sorted(fam.gguf.arch for fam in _FAMILIES.values() if fam.gguf))
    raise UserError(f"GGUF architecture {arch!r} is not supported; trtserve reads GGUF files of: {known}")


def family_for_trtllm(architecture: str) -> DecoderFamily:
    """The family of an engine (which records only TensorRT-LLM's architecture name); families
    sharing one agree on its layout and features, so the first registered stands for them all."""
    for fam in _FAMILIES.values():
        if fam.trtllm_architecture == architecture:
            return fam
    known = ", ".join(sorted({fam.trtllm_architecture for fam in _FAMILIES.values()}))
    raise UserError(f"the engine's model architecture {architecture} is not one trtserve runs ({known}); rebuild it")


for _fam in (
    llama.FAMILY,
    mistral.FAMILY,
    qwen2.FAMILY,
    qwen3.FAMILY,
    smollm3.FAMILY,
    granite.FAMILY,
    phi3.FAMILY,
    qwen3_moe.FAMILY,
    mixtral.FAMILY,
    qwen2_moe.FAMILY,
    olmoe.FAMILY,
    gemma2.FAMILY,
    gemma3.FAMILY,
    gpt_oss.FAMILY,
):
    register_family(_fam)
