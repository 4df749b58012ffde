"""Images in (docs/vision.md): what a vision-language engine declares, and one image as a request carries it.

`VisionConfig` is recorded in manifest.json by the build and read back by the engine and by serve
(through `EngineInfo.vision`): how a client's image becomes the tower's pixels (serve does that with
trtserve/vision, without torch), which token stands for an image in the prompt and how many copies of it
one image takes, and the tower's and projector's shapes (the engine's). `ImageInput` is one image of one
request, preprocessed: it travels in `RequestOptions.images`, in prompt order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel


class ImageProcessing(BaseModel):
    """The checkpoint's image processor (preprocessor_config.json), as serve applies it."""

    height: int  # pixels of the tensor the tower takes
    width: int
    shortest_edge: int | None = None  # resize so the shorter side is this, then center-crop; None: resize to size
    # Idefics3: resize the longer side to this first, then cut height x width tiles plus the whole image
    longest_edge: int | None = None
    split: bool = True  # Idefics3's do_image_splitting; False: the whole image only
    resample: int = 3  # PIL's filter (3: bicubic)
    rescale: float = 1 / 255
    mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
    std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)


class VisionTower(BaseModel):
    """A ViT (CLIP or SigLIP) and which of its layers' outputs the projector reads."""

    kind: Literal["clip", "siglip"]
    hidden_size: int
    intermediate_size: int
    num_layers: int  # layers the checkpoint has
    num_heads: int
    patch_size: int
    image_size: int
    layer_norm_eps: float
    act: str  # quick_gelu | gelu | gelu_pytorch_tanh
    feature_layers: tuple[int, ...]  # hidden-state indices (HF's, -1 the last), concatenated
    select: Literal["default", "full"]  # default: the CLS token's row dropped (HF's strategy names)


class TilePrompt(BaseModel):
    """The text Idefics3's processor writes around an image's tiles: `{around}<row_r_col_c>` before each tile's
    rows, a newline after each row of tiles, then a newline and `{around}{global_tag}` before the whole image's
    rows and `{around}` after them (only the last two for an image of one tile)."""

    around: str  # <fake_token_around_image>
    global_tag: str  # <global-img>
    max_side: int  # the most tiles a side of an image is cut into


class VisionConfig(BaseModel):
    family: str  # the vision family (models/vision_family.py): "llava", "idefics3", "gemma3"
    image_token_id: int  # the prompt token each of an image's rows replaces
    image_token: str  # the placeholder's text in the chat template ("<image>", Gemma 3's "<start_of_image>")
    tokens_per_image: int  # rows one image (one tile, where images are tiled) takes in the prompt
    processing: ImageProcessing
    tower: VisionTower
    # what maps the tower's output to the language model: LLaVA's 2-layer MLP over the feature layers; over the
    # post-layernormed last layer, Idefics3's pixel shuffle and projection or Gemma 3's average pooling,
    # RMSNorm and projection
    projector: Literal["mlp", "pixel_shuffle", "pool"] = "mlp"
    projector_act: str | None  # the MLP projector's activation; None: another projector
    scale_factor: int = 1  # Idefics3's pixel shuffle: scale_factor**2 patch rows -> one prompt row
    tiles: TilePrompt | None = None  # Idefics3: the prompt text around each tile; None: tokens_per_image rows
    # the text of image_token_id where the template's placeholder is another token (Gemma 3's <image_soft_token>)
    row_token: str | None = None
    # the text around an image's rows in place of its placeholder (Gemma 3's "\n\n<start_of_image>" and
    # "<end_of_image>\n\n"), expanded before tokenizing as HF's processor does
    image_prefix: str = ""
    image_suffix: str = ""
    bidirectional: bool = False  # an image's rows attend to each other both ways at prefill (Gemma 3)
    vision_parameters: int  # parameters of the tower and projector (inspect)


@dataclass(frozen=True, eq=False)
class ImageInput:
    """One preprocessed image of a request (engine/request_options.py `images`)."""

    # (3, height, width) float32, normalized as the tower takes it; (tiles, 3, height, width) for a tiled image
    pixels: np.ndarray = field(repr=False)
    num_tokens: int  # prompt rows it takes: VisionConfig.tokens_per_image times its frames
    grid: tuple[int, int] = (0, 0)  # Idefics3's tile rows and columns; (0, 0): the whole image only
    content_hash: str = ""  # blake2b of the pixels: keys the encoder cache and the prefix cache

    def __post_init__(self):
        if not self.content_hash:
            digest = hashlib.blake2b(np.ascontiguousarray(self.pixels).tobytes(), digest_size=16).hexdigest()
            object.__setattr__(self, "content_hash", digest)

    @property
    def frames(self) -> int:
        """Pixel frames the tower encodes: the tiles (and the whole image), or 1."""
        return self.pixels.shape[0] if self.pixels.ndim == 4 else 1
