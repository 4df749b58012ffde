"""The prompt's image placeholders: the chat template writes one image token per image; the model takes
`tokens_per_image` copies of it (HF's processors expand it alike)."""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.vision import VisionConfig

IMAGE_PART = {"type": "image"}  # what chat templates read for an image in a message's content


def expand_image_tokens(token_ids: list[int], vision: VisionConfig, num_images: int) -> list[int]:
    """token_ids with each image token repeated tokens_per_image times; UserError where the rendered prompt
    does not hold one image token per image (a template that drops images, or image tokens in the text)."""
    tid = vision.image_token_id
    found = sum(1 for t in token_ids if t == tid)
    if found != num_images:
        raise UserError(
            f"the prompt holds {found} image placeholders ({vision.image_token}) for {num_images} images; a chat "
            f"message's image part writes its own (leave {vision.image_token} out of the text), KServe's text_input "
            "writes one per image"
        )
    out: list[int] = []
    for t in token_ids:
        out.extend([t] * vision.tokens_per_image if t == tid else [t])
    return out


def no_vision(model: str) -> UserError:
    """The error for an image sent to a text-only model."""
    return UserError(f"model {model} is text-only and does not take images; send text, or use a vision-language model")
