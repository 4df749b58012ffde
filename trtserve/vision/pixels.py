"""An RGB image -> the tower's pixels (3, height, width) float32, as HF's CLIP / SigLIP image processors
make them with PIL: resize (shortest edge, then center crop; or straight to size), rescale, normalize."""

from __future__ import annotations

import numpy as np
from PIL import Image

from trtserve.engine.vision import ImageInput, ImageProcessing, VisionConfig
from trtserve.vision.tiles import to_tiles


def to_pixels(img: Image.Image, p: ImageProcessing) -> np.ndarray:
    if p.shortest_edge is None:
        img = img.resize((p.width, p.height), resample=p.resample)
    else:
        w, h = img.size
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(p.shortest_edge * long / short)  # HF's get_resize_output_image_size
        size = (p.shortest_edge, new_long) if w <= h else (new_long, p.shortest_edge)
        img = img.resize(size, resample=p.resample)
        img = _center_crop(img, p.height, p.width)
    x = np.asarray(img, dtype=np.float64) * p.rescale  # (h, w, 3), as HF rescales
    x = x.astype(np.float32)
    mean, std = np.asarray(p.mean, np.float32), np.asarray(p.std, np.float32)
    return np.ascontiguousarray(((x - mean) / std).transpose(2, 0, 1))  # (3, h, w)


def _center_crop(img: Image.Image, height: int, width: int) -> Image.Image:
    w, h = img.size
    if (w, h) == (width, height):
        return img
    arr = np.asarray(img)
    if h < height or w < width:  # pad with zeros around, as HF's center_crop does
        out = np.zeros((max(h, height), max(w, width), 3), dtype=arr.dtype)
        top, left = (out.shape[0] - h) // 2, (out.shape[1] - w) // 2
        out[top : top + h, left : left + w] = arr
        arr, (h, w) = out, out.shape[:2]
    top, left = int((h - height) / 2), int((w - width) / 2)
    return Image.fromarray(arr[top : top + height, left : left + width])


def image_input(img: Image.Image, vision: VisionConfig) -> ImageInput:
    """One image of a request, as the engine takes it (its tiles, where the model tiles images)."""
    if vision.tiles is not None:
        pixels, grid = to_tiles(img, vision.processing)
        return ImageInput(pixels=pixels, num_tokens=vision.tokens_per_image * pixels.shape[0], grid=grid)
    return ImageInput(pixels=to_pixels(img, vision.processing), num_tokens=vision.tokens_per_image)
