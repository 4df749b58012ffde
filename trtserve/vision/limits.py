"""What one request may send: images, bytes and pixels, each refused with a sentence naming the limit."""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.engine.errors import UserError


@dataclass(frozen=True)
class ImageLimits:
    max_images: int = 8  # images in one request
    max_bytes: int = 20 << 20  # bytes of one encoded image
    max_pixels: int = 4096 * 4096  # width * height of one decoded image (checked before decoding)

    def check_count(self, n: int) -> None:
        if n > self.max_images:
            raise UserError(f"the request has {n} images; at most {self.max_images} are allowed per request")

    def check_bytes(self, n: int) -> None:
        if n > self.max_bytes:
            raise UserError(f"an image of {n} bytes exceeds the limit of {self.max_bytes} bytes; send a smaller one")

    def check_pixels(self, width: int, height: int) -> None:
        if width * height > self.max_pixels:
            raise UserError(
                f"an image of {width}x{height} pixels exceeds the limit of {self.max_pixels} pixels; downscale it"
            )
