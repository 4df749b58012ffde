"""Images in a request (docs/vision.md): the image parts a front end parsed -> the engine's ImageInput
values, decoded and preprocessed with trtserve/vision off the event loop, once the engine's info says the
model takes images (EngineInfo.vision; a text-only model's request is a 400 naming that)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.manifest import MANIFEST, read_manifest
from trtserve.engine.vision import ImageInput, VisionConfig
from trtserve.vision.decode import decode_image
from trtserve.vision.limits import ImageLimits
from trtserve.vision.pixels import image_input
from trtserve.vision.prompt import expand_images, no_vision
from trtserve.vision.sources import b64_bytes, url_bytes


@dataclass(frozen=True)
class ImageSource:
    """One image as a client sent it: a URL (data: or http(s)), bare base64, or raw bytes (KServe)."""

    url: str | None = None
    base64: str | None = None
    data: bytes | None = None

    def read(self, limits: ImageLimits, allowed_domains: frozenset[str]) -> bytes:
        if self.data is not None:
            limits.check_bytes(len(self.data))
            return self.data
        if self.base64 is not None:
            return b64_bytes(self.base64, limits)
        return url_bytes(self.url or "", limits, allowed_domains)


def _load(sources: list[ImageSource], vision: VisionConfig, limits: ImageLimits, allowed: frozenset[str]):
    return tuple(image_input(decode_image(s.read(limits, allowed), limits), vision) for s in sources)


def vision_of(svc) -> VisionConfig | None:
    """The model's VisionConfig, as its engine declares it (None: text only)."""
    return svc.engine.info.vision


def check_takes_images(svc, n: int) -> VisionConfig:
    vision = vision_of(svc)
    if vision is None:
        raise no_vision(svc.model_name)
    svc.config.image_limits.check_count(n)
    return vision


async def load_images(svc, sources: list[ImageSource]) -> tuple[ImageInput, ...]:
    """The images, decoded and preprocessed in a worker thread within the run config's image_limits;
    UserError (a 400) naming what is wrong."""
    if not sources:
        return ()
    vision = check_takes_images(svc, len(sources))
    allowed = frozenset(svc.config.allowed_media_domains)
    return await asyncio.to_thread(_load, sources, vision, svc.config.image_limits, allowed)


def prompt_with_images(svc, text: str, images: tuple[ImageInput, ...], add_special_tokens: bool = True) -> list[int]:
    """The prompt's token ids: each image placeholder in `text` expanded to its image's text as the model's
    processor writes it (trtserve/vision/prompt.py), then tokenized, as HF's processor tokenizes it."""
    if images:
        text = expand_images(text, check_takes_images(svc, len(images)), images)
    return list(svc.tokenizer.encode(text, add_special_tokens=add_special_tokens))


def vision_dir(model_dir: Path, version_dir: Path) -> Path | None:
    """The kinds table's detector (serve/repository/kinds.py VISION): the version dir when its manifest records
    a vision part; None otherwise (a manifest that cannot be read is left to the LLM kind, which names why)."""
    if not (version_dir / MANIFEST).is_file():
        return None
    try:
        return version_dir if read_manifest(version_dir).vision is not None else None
    except UserError:
        return None
