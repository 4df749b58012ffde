"""Building a vision-language model (docs/vision.md): the language model converts as its text family's
causal LM does; the tower and projector go to vision.safetensors in the model dtype; the manifest records
the VisionConfig (image processing, image token and its per-image count, tower shapes), and the
checkpoint's processor config is kept in tokenizer/.

    LlavaForConditionalGeneration     CLIP or SigLIP tower, vision_feature_layer(s), 2-layer MLP projector
    Idefics3ForConditionalGeneration  SigLIP-like tower, pixel-shuffle connector, images cut into tiles
    Gemma3ForConditionalGeneration    SigLIP tower, pooling projector, bidirectional attention within an image
"""

from __future__ import annotations

import json
from pathlib import Path

from trtserve.build.config import BuildConfig
from trtserve.build.reader import CheckpointReader, RenamedReader
from trtserve.engine.errors import UserError
from trtserve.engine.layout import VISION_WEIGHTS
from trtserve.engine.vision import ImageProcessing, TilePrompt, VisionConfig, VisionTower
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.registry import family_for_hf
from trtserve.models.vision import ACTIVATIONS, tokens_per_image
from trtserve.models.vision_family import PROJECTOR, TOWER, VisionFamily, vision_family

SIGLIP_MEAN = (0.5, 0.5, 0.5)
# a tensor each projector cannot do without
PROJECTOR_WEIGHT = {
    "mlp": "linear_1.weight",
    "pixel_shuffle": "modality_projection.proj.weight",
    "pool": "mm_input_projection_weight",
}


def text_family_of(raw: dict):
    """The text family a checkpoint's config.json converts as: its text_config's for a vision checkpoint."""
    fam = vision_family(raw.get("architectures"))
    if fam is None:
        return None
    text = raw.get("text_config") or {}
    model_type = text.get("model_type", "llama")
    arch = fam.text_architectures.get(model_type)
    return family_for_hf(text.get("architectures") or ([arch] if arch else None), model_type)


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
    hf, v, fam = reader.full_config, reader.full_config.vision_config, reader.vision_family.name
    kind = reader.vision_family.towers.get(v.model_type)
    if kind is None:
        towers = " or ".join(reader.vision_family.towers)
        raise UserError(f"a {v.model_type} vision tower is not supported; {fam} models build with {towers}")
    layers = hf.vision_feature_layer if fam == "llava" else -1
    tower = VisionTower(
        kind=kind, hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
        num_layers=v.num_hidden_layers, num_heads=v.num_attention_heads, patch_size=v.patch_size,
        image_size=v.image_size, layer_norm_eps=v.layer_norm_eps, act=v.hidden_act,
        feature_layers=tuple(layers) if isinstance(layers, list | tuple) else (layers,),
        select=hf.vision_feature_select_strategy if fam == "llava" else "full",
    )  # fmt: skip
    path = Path(reader.path)
    parts = _PARTS[fam](hf, path, tower)
    for act in (tower.act, parts.get("projector_act") or tower.act):
        if act not in ACTIVATIONS:
            raise UserError(f"activation {act!r} is not supported in the vision tower or projector")
    processing = parts["processing"]
    if (processing.height, processing.width) != (tower.image_size, tower.image_size):
        raise UserError(
            f"the image processor makes {processing.height}x{processing.width} images but the tower takes "
            f"{tower.image_size}x{tower.image_size}; fix preprocessor_config.json"
        )
    token_id = getattr(hf, "image_token_id", None)
    token_id = token_id if token_id is not None else hf.image_token_index
    params = sum(_numel(reader.inner.shape(n)) for n in reader.vision_names.values())
    return VisionConfig(
        family=fam,
        image_token_id=token_id,
        image_token=parts.pop("image_token", None) or _token_text(path, token_id),
        tokens_per_image=parts.pop("tokens_per_image", None) or tokens_per_image(tower, parts.get("scale_factor", 1)),
        tower=tower,
        vision_parameters=params,
        **parts,
    )


def _llava(hf, path: Path, tower: VisionTower) -> dict:
    return {"processing": _processing(path, tower), "projector_act": hf.projector_hidden_act}


def _idefics3(hf, path: Path, tower: VisionTower) -> dict:
    processing = _tiled_processing(path, tower)
    return {
        "processing": processing, "projector": "pixel_shuffle", "projector_act": None,
        "scale_factor": hf.scale_factor, "tiles": _tile_prompt(path, processing),
    }  # fmt: skip


def _gemma3(hf, path: Path, tower: VisionTower) -> dict:
    """Gemma 3's processor writes two newlines and <start_of_image>, the soft tokens, <end_of_image> and two more
    where the template wrote <start_of_image>."""
    f = path / "preprocessor_config.json"
    if f.is_file() and json.loads(f.read_text()).get("do_pan_and_scan"):
        raise UserError("Gemma 3's pan-and-scan crops are not supported; set do_pan_and_scan to false")
    side = tower.image_size // tower.patch_size
    pooled = int(hf.mm_tokens_per_image**0.5)
    if pooled * pooled != hf.mm_tokens_per_image or side % pooled:
        raise UserError(f"mm_tokens_per_image {hf.mm_tokens_per_image} does not pool a {side}x{side} patch grid")
    boi, eoi = _token_text(path, hf.boi_token_index), _token_text(path, hf.eoi_token_index)
    return {
        "processing": _processing(path, tower), "projector": "pool", "projector_act": None,
        "tokens_per_image": hf.mm_tokens_per_image, "image_token": boi,
        "row_token": _token_text(path, hf.image_token_index), "image_prefix": f"\n\n{boi}",
        "image_suffix": f"{eoi}\n\n", "bidirectional": True,
    }  # fmt: skip


_PARTS = {"llava": _llava, "idefics3": _idefics3, "gemma3": _gemma3}  # the vision families' own fields


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


def _tiled_processing(path: Path, tower: VisionTower) -> ImageProcessing:
    """Idefics3's preprocessor_config.json: longest-edge resize, tiles of max_image_size, SigLIP's normalization."""
    f = path / "preprocessor_config.json"
    raw = json.loads(f.read_text()) if f.is_file() else {}
    tile = (raw.get("max_image_size") or {}).get("longest_edge", tower.image_size)
    longest = (raw.get("size") or {"longest_edge": 4 * tile}).get("longest_edge")
    if not raw.get("do_resize", True) or longest is None:
        raise UserError("an Idefics3 image processor must resize by size.longest_edge; fix preprocessor_config.json")
    return ImageProcessing(
        height=tile,
        width=tile,
        longest_edge=longest,
        split=raw.get("do_image_splitting", True),
        resample=raw.get("resample", 1),  # Lanczos: Idefics3's default
        rescale=raw.get("rescale_factor", 1 / 255),
        mean=tuple(raw.get("image_mean", SIGLIP_MEAN)),
        std=tuple(raw.get("image_std", SIGLIP_MEAN)),
    )


def _tile_prompt(path: Path, p: ImageProcessing) -> TilePrompt:
    """The tags Idefics3's processor writes around tiles, which the tokenizer must hold as tokens."""
    fake, image, tag = "<fake_token_around_image>", "<image>", "<global-img>"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    for t in (fake, image, tag):
        if tok.token_to_id(t) is None:
            raise UserError(f"the tokenizer has no {t} token, which Idefics3's prompts need; fix the tokenizer")
    side = -(-(p.longest_edge or 0) // p.height) if p.split else 0  # the most tiles a side can have
    return TilePrompt(around=fake, global_tag=tag, max_side=side)


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
    projector = PROJECTOR + PROJECTOR_WEIGHT[vision.projector]
    if projector not in tensors or TOWER + "embeddings.patch_embedding.weight" not in tensors:
        raise UserError("the checkpoint lacks the vision tower's patch embedding or the projector; check the weights")
    save_file(tensors, tmp / VISION_WEIGHTS)
