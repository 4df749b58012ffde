"""Architecture name -> decoder family. The engine never imports a family by name."""

from __future__ import annotations

from trtserve.errors import UserError
from trtserve.models import llama, mistral, qwen2
from trtserve.models.family import DecoderFamily

FAMILIES: tuple[DecoderFamily, ...] = (llama.FAMILY, mistral.FAMILY, qwen2.FAMILY)
_BY_HF = {arch: fam for fam in FAMILIES for arch in fam.hf_architectures}
_BY_GGUF = {fam.gguf_arch: fam for fam in FAMILIES if fam.gguf_arch}


def supported() -> str:
    return ", ".join(sorted(_BY_HF))


def family_for_hf(architectures: list[str] | None, model_type: str | None = None) -> DecoderFamily:
    for arch in architectures or []:
        if arch in _BY_HF:
            return _BY_HF[arch]
    if not architectures and model_type:
        for fam in FAMILIES:
            if fam.name == model_type:
                return fam
    got = ", ".join(architectures or []) or model_type or "none given"
    raise UserError(f"architecture {got} is not supported; trtserve builds: {supported()}")


def family_for_gguf(arch: str) -> DecoderFamily:
    if arch in _BY_GGUF:
        return _BY_GGUF[arch]
    raise UserError(
        f"GGUF architecture {arch!r} is not supported; trtserve reads GGUF files of: {', '.join(sorted(_BY_GGUF))}"
    )
