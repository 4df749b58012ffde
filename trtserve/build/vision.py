"""Building a vision-language model (docs/vision.md): the language model converts as its text family's
causal LM does; the tower and projector go to vision.safetensors in the model dtype; the manifest records
the VisionConfig (image processing, image token and its per-image count, tower shapes), and the
checkpoint's processor config is kept in tokenizer/.

    LlavaForConditionalGeneration   CLIP or SigLIP tower, vision_feature_layer(s), 2-layer MLP projector
"""

from __future__ import annotations

import json
from pathlib import Path

from trtserve.build.config import BuildConfig
from trtserve.build.reader import CheckpointReader, RenamedReader
from trtserve.engine.errors import UserError
from trtserve.engine.layout import VISION_WEIGHTS
from trtserve.engine.vision import ImageProcessing, VisionConfig, VisionTower
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.registry import family_for_hf
from trtserve.models.vision import ACTIVATIONS, tokens_per_image
from trtserve.models.vision_family import PROJECTOR, TOWER, VisionFamily, vision_family

SIGLIP_MEAN = (0.5, 0.5, 0.5)


def text_family_of(raw: dict):
    """The text family a checkpoint's config.json converts as: its text_config's for a vision checkpoint."""
    if vision_family(raw.get("architectures")) is None:
        return None
    text = raw.get("text_config") or {}
    return family_for_hf(text.get("architectures"), text.get("model_type", "llama"))


class VisionReader(RenamedReader):
    """A vision checkpoint through the CheckpointReader interface, as its text family's causal LM: the
    language model's tensors under the family's HF names; the tower's and projector's kept apart."""

    def __init__(self, inner: CheckpointReader, fam: VisionFamily):
        super().__init__(inner)
        self.vision_family = fam
        self.full_config = inner.hf_config
        self.hf_config = inner.hf_config.text_config
        self.vision_names: dict[str, str] = {}  # vision.safetensors name -> checkpoint name
        for n in inner.names():
            target = fam.target(n)
            if target is None:
                raise UserError(f"tensor {n} belongs to no part of a {fam.name} checkpoint; check the weights")
            into = self.vision_names if target.startswith((TOWER, PROJECTOR)) else self._source
            into[target] = n


def vision_reader(cfg: BuildConfig, reader: CheckpointReader) -> CheckpointReader:
    """A VisionReader for a vision-language checkpoint, else `reader` itself."""
    fam = vision_family(list(getattr(reader.hf_config, "architectures", None) or []))
    if fam is None:
        return reader
    if cfg.backend != "torch":
        raise UserError(
            f"vision-language models are built for the torch backend only (TensorRT-LLM's multimodal "
            f"engines are not mapped yet); leave out --backend {cfg.backend}"
        )
    if cfg.quant or cfg.pooling:
        raise UserError("vision-language models are built unquantized and generating; leave out --quant and --pooling")
    return VisionReader(reader, fam)


def vision_config(reader: CheckpointReader) -> VisionConfig | None:
    """What the manifest records of a vision build (None for a text one)."""
    if not isinstance(reader, VisionReader):
        return None
    hf, v = reader.full_config, reader.full_config.vision_config
    kind = reader.vision_family.towers.get(v.model_type)
    if kind is None:
        raise UserError(f"a {v.model_type} vision tower is not supported; LLaVA models build with a CLIP or SigLIP one")
    layers = hf.vision_feature_layer
    tower = VisionTower(
        kind=kind, hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
        num_layers=v.num_hidden_layers, num_heads=v.num_attention_heads, patch_size=v.patch_size,
        image_size=v.image_size, layer_norm_eps=v.layer_norm_eps, act=v.hidden_act,
        feature_layers=tuple(layers) if isinstance(layers, list | tuple) else (layers,),
        select=hf.vision_feature_select_strategy,
    )  # fmt: skip
    for act in (tower.act, hf.projector_hidden_act):
        if act not in ACTIVATIONS:
            raise UserError(f"activation {act!r} is not supported in the vision tower or projector")
    token_id = getattr(hf, "image_token_id", None)
    token_id = token_id if token_id is not None else hf.image_token_index
    processing = _processing(Path(reader.path), tower)
    if (processing.height, processing.width) != (tower.image_size, tower.image_size):
        raise UserError(
            f"the image processor makes {processing.height}x{processing.width} images but the tower takes "
            f"{tower.image_size}x{tower.image_size}; fix preprocessor_config.json"
        )
    params = sum(_numel(reader.inner.shape(n)) for n in reader.vision_names.values())
    return VisionConfig(
        family=reader.vision_family.name,
        image_token_id=token_id,
        image_token=_token_text(Path(reader.path), token_id),
        tokens_per_image=tokens_per_image(tower),
        processing=processing,
        tower=tower,
        projector_act=hf.projector_hidden_act,
        vision_parameters=params,
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _processing(path: Path, tower: VisionTower) -> ImageProcessing:
    """preprocessor_config.json's resize, crop and normalization (the tower's defaults where it has none)."""
    f = path / "preprocessor_config.json"
    raw = json.loads(f.read_text()) if f.is_file() else {}
    size = raw.get("size") or ({"shortest_edge": tower.image_size} if tower.kind == "clip" else {})
    crop = raw.get("crop_size") or {}
    n = tower.image_size
    if "shortest_edge" in size and raw.get("do_center_crop", True):
        height, width, edge = crop.get("height", n), crop.get("width", n), size["shortest_edge"]
    else:
        height, width, edge = size.get("height", n), size.get("width", n), None
    defaults = ImageProcessing(height=height, width=width)
    siglip = tower.kind == "siglip"
    return ImageProcessing(
        height=height,
        width=width,
        shortest_edge=edge,
        resample=raw.get("resample", 3),  # bicubic: CLIP's and SigLIP's default
        rescale=raw.get("rescale_factor", 1 / 255),
        mean=tuple(raw.get("image_mean", SIGLIP_MEAN if siglip else defaults.mean)),
        std=tuple(raw.get("image_std", SIGLIP_MEAN if siglip else defaults.std)),
    )


def _token_text(path: Path, token_id: int) -> str:
    from tokenizers import Tokenizer

    f = path / "tokenizer.json"
    text = Tokenizer.from_file(str(f)).id_to_token(token_id) if f.is_file() else None
    if text is None:
        raise UserError(f"the tokenizer has no image token (id {token_id}, the config's image_token_index); fix it")
    return text


def write_vision(tmp: Path, vision: VisionConfig, reader: VisionReader, dtype: str) -> None:
    """vision.safetensors in the staged dir: the tower's and projector's tensors in the model dtype."""
    from safetensors.torch import save_file

    dt = TORCH_DTYPES[dtype]
    tensors = {t: reader.inner.load(n).to(dt).contiguous() for t, n in sorted(reader.vision_names.items())}
    if PROJECTOR + "linear_1.weight" not in tensors or TOWER + "embeddings.patch_embedding.weight" not in tensors:
        raise UserError("the checkpoint lacks the vision tower's patch embedding or the projector; check the weights")
    save_file(tensors, tmp / VISION_WEIGHTS)
