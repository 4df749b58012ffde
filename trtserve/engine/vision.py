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


class VisionConfig(BaseModel):
    family: str  # the vision family (models/vision_family.py): "llava"
    image_token_id: int  # the prompt token each of an image's rows replaces
    image_token: str  # its text in the chat template ("<image>")
    tokens_per_image: int  # rows one image takes in the prompt
    processing: ImageProcessing
    tower: VisionTower
    projector_act: str  # the MLP projector's activation
    vision_parameters: int  # parameters of the tower and projector (inspect)


@dataclass(frozen=True, eq=False)
class ImageInput:
    """One preprocessed image of a request (engine/request_options.py `images`)."""

    pixels: np.ndarray = field(repr=False)  # (3, height, width) float32, normalized as the tower takes it
    num_tokens: int  # prompt rows it takes: VisionConfig.tokens_per_image
    content_hash: str = ""  # blake2b of the pixels: keys the encoder cache and the prefix cache

    def __post_init__(self):
        if not self.content_hash:
            digest = hashlib.blake2b(np.ascontiguousarray(self.pixels).tobytes(), digest_size=16).hexdigest()
            object.__setattr__(self, "content_hash", digest)
