"""Vision-language checkpoints as data: which HF architectures are a vision tower and projector over one
of our text families, and where each part's tensors live in the checkpoint (docs/vision.md).

A vision family's language model converts as its text family's causal LM does (its text_config names
that family); the tower's and projector's tensors go to vision.safetensors under `tower.` and
`projector.` (models/vision.py reads them). Architectures we know but do not run yet are refused in one
sentence rather than misread as a text model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.engine.errors import UserError

TOWER, PROJECTOR, TEXT, LM_HEAD = "tower.", "projector.", "model.", "lm_head."


@dataclass(frozen=True)
class VisionFamily:
    name: str  # VisionConfig.family
    hf_architectures: tuple[str, ...]
    # target prefix -> the checkpoint prefixes that hold it (transformers 5 saves and the older layout alike)
    prefixes: dict[str, tuple[str, ...]]
    towers: dict[str, str]  # the vision_config's model_type -> VisionTower.kind
    # a text_config's model_type -> the causal LM it converts as, where the text family's name is not it
    text_architectures: dict[str, str] = field(default_factory=dict)

    def target(self, name: str) -> str | None:
        """A checkpoint tensor's name in the engine (the text model's under the text family's HF names)."""
        pairs = sorted(((s, t) for t, srcs in self.prefixes.items() for s in srcs), key=lambda p: -len(p[0]))
        for src, tgt in pairs:
            if name.startswith(src):
                return tgt + name[len(src) :]
        return None


LLAVA = VisionFamily(
    name="llava",
    hf_architectures=("LlavaForConditionalGeneration",),
    prefixes={
        TOWER: (
            "model.vision_tower.vision_model.",
            "model.vision_tower.",
            "vision_tower.vision_model.",
            "vision_tower.",
        ),
        PROJECTOR: ("model.multi_modal_projector.", "multi_modal_projector."),
        TEXT: ("model.language_model.", "language_model.model."),
        LM_HEAD: ("lm_head.", "language_model.lm_head."),
    },
    towers={"clip_vision_model": "clip", "siglip_vision_model": "siglip"},
)
IDEFICS3 = VisionFamily(
    name="idefics3",
    hf_architectures=("Idefics3ForConditionalGeneration",),
    prefixes={
        TOWER: ("model.vision_model.",),
        PROJECTOR: ("model.connector.",),
        TEXT: ("model.text_model.",),
        LM_HEAD: ("lm_head.",),
    },
    towers={"idefics3_vision": "siglip"},
)
GEMMA3 = VisionFamily(
    name="gemma3",
    hf_architectures=("Gemma3ForConditionalGeneration",),
    prefixes=LLAVA.prefixes,  # transformers names Gemma 3's parts as it names LLaVA's
    towers={"siglip_vision_model": "siglip"},
    text_architectures={"gemma3_text": "Gemma3ForCausalLM"},
)
VISION_FAMILIES = (LLAVA, IDEFICS3, GEMMA3)

# Vision-language architectures trtserve knows of but does not run yet: refused by name at build.
NOT_YET = {
    "SmolVLMForConditionalGeneration": "SmolVLM (tile splitting, pixel-shuffle connector)",
    "Qwen2VLForConditionalGeneration": "Qwen2-VL (M-RoPE)",
    "Qwen2_5_VLForConditionalGeneration": "Qwen2.5-VL (M-RoPE)",
    "LlavaNextForConditionalGeneration": "LLaVA-NeXT (any-resolution tiles)",
    "LlavaOnevisionForConditionalGeneration": "LLaVA-OneVision (any-resolution tiles)",
    "MllamaForConditionalGeneration": "Llama 3.2 Vision (cross-attention)",
}


def vision_family(architectures: list[str] | None) -> VisionFamily | None:
    """The vision family of a checkpoint's architectures, None for a text one; UserError for one not run yet."""
    for arch in architectures or []:
        for fam in VISION_FAMILIES:
            if arch in fam.hf_architectures:
                return fam
        if arch in NOT_YET:
            runs = ", ".join(a for f in VISION_FAMILIES for a in f.hf_architectures)
            raise UserError(
                f"{arch} ({NOT_YET[arch]}) is not supported yet; of vision-language models trtserve builds {runs}"
            )
    return None


def vision_family_named(name: str | None) -> VisionFamily | None:
    """The vision family a manifest records (VisionConfig.family); None for a text-only engine."""
    return next((f for f in VISION_FAMILIES if f.name == name), None) if name is not None else None
