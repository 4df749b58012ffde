"""The prompt's image placeholders (docs/vision.md): the chat template writes one placeholder per image; each
becomes its image's text as the family's HF processor writes it (the rows' tokens, with Gemma 3's newlines and
start/end tokens or Idefics3's tile tags around them) before the prompt is tokenized, as HF's processors do,
so the tokenizer merges that text with the prompt's own as theirs does."""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.vision import ImageInput, TilePrompt, VisionConfig

IMAGE_PART = {"type": "image"}  # what chat templates read for an image in a message's content


def expand_images(text: str, vision: VisionConfig, images: tuple[ImageInput, ...]) -> str:
    """text with each image placeholder replaced by its image's text; UserError where the text does not hold
    one placeholder per image (a template that drops images, or placeholders in the text)."""
    pieces = text.split(vision.image_token)
    if len(pieces) - 1 != len(images):
        raise UserError(
            f"the prompt holds {len(pieces) - 1} image placeholders ({vision.image_token}) for {len(images)} "
            f"images; a chat message's image part writes its own (leave {vision.image_token} out of the text), "
            "KServe's text_input writes one per image"
        )
    out = [pieces[0]]
    for img, rest in zip(images, pieces[1:], strict=True):
        out += [image_text(img, vision), rest]
    return "".join(out)


def image_text(img: ImageInput, vision: VisionConfig) -> str:
    """One image's text: its rows' tokens, inside the text its family's processor writes around them."""
    rows = (vision.row_token or vision.image_token) * vision.tokens_per_image
    if vision.tiles is None:
        return vision.image_prefix + rows + vision.image_suffix
    return _tiled(img.grid, rows, vision.tiles)


def _tiled(grid: tuple[int, int], rows: str, p: TilePrompt) -> str:
    """Idefics3's processor text for one image: each tile under its row/column tag, then the whole image."""
    tiles = "".join(
        "".join(f"{p.around}<row_{r}_col_{c}>{rows}" for c in range(1, grid[1] + 1)) + "\n"
        for r in range(1, grid[0] + 1)
    )
    return (tiles + "\n" if tiles else "") + f"{p.around}{p.global_tag}{rows}{p.around}"


def no_vision(model: str) -> UserError:
    """The error for an image sent to a text-only model."""
    return UserError(f"model {model} is text-only and does not take images; send text, or use a vision-language model")
