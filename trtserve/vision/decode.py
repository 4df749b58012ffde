"""A client's image bytes -> an RGB Pillow image: PNG, JPEG or WebP only, within the limits."""

from __future__ import annotations

import io
import warnings

from PIL import Image

from trtserve.engine.errors import UserError
from trtserve.vision.limits import ImageLimits

FORMATS = ("PNG", "JPEG", "WEBP")


def decode_image(data: bytes, limits: ImageLimits) -> Image.Image:
    """The image as RGB; UserError for bytes that are not a whole PNG, JPEG or WebP, or are too big."""
    limits.check_bytes(len(data))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=FORMATS)
            limits.check_pixels(*img.size)  # from the header: nothing is decoded yet
            img.load()
    except UserError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise UserError(
            "the image could not be decoded: send a complete PNG, JPEG or WebP file (base64 in a data: URL)"
        ) from None
    return img.convert("RGB")
