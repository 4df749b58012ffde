"""Chat content parts beyond text: an `image_url` part (docs/vision.md). Its URL is a data: URL, or an
http(s) URL the server fetches only from --allowed-media-domains (serve/images.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from trtserve.serve.images import ImageSource
from trtserve.serve.json_body import JsonBody
from trtserve.vision.prompt import IMAGE_PART


class ImageURL(JsonBody):
    model_config = ConfigDict(extra="forbid")
    url: str
    detail: Literal["auto", "low", "high"] | None = None  # accepted; every image is one tile here


class ImageURLPart(JsonBody):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_url"]
    image_url: ImageURL

    def source(self) -> ImageSource:
        return ImageSource(url=self.image_url.url)


def image_sources(message) -> list[ImageSource]:
    """A ChatMessage's image parts' sources, in order."""
    parts = message.content if isinstance(message.content, list) else []
    return [p.source() for p in parts if isinstance(p, ImageURLPart)]


def template_content(message) -> str | list[dict]:
    """A ChatMessage's content as the chat template reads it: its text, or where it holds an image its parts,
    text parts and `{"type": "image"}` where each image was."""
    if not image_sources(message):
        return message.text()
    return [IMAGE_PART if isinstance(p, ImageURLPart) else {"type": "text", "text": p.text} for p in message.content]
