"""What one request may send: images, bytes and pixels (the run config's `image_limits`, `trtserve run
--max-images` ...), each refused with a sentence naming the limit."""

from __future__ import annotations

from pydantic import BaseModel, ByteSize, ConfigDict, Field

from trtserve.engine.errors import UserError


class ImageLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_images: int = Field(8, ge=0)  # images in one request (per prompt of a KServe infer batch)
    max_bytes: ByteSize = Field(ByteSize(20 << 20), gt=0)  # bytes of one encoded image (e.g. "20MiB")
    max_pixels: int = Field(4096 * 4096, gt=0)  # width * height of one image, read from its header before decoding

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
