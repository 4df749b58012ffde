"""An RGB image -> Idefics3's tiles, as HF's Idefics3ImageProcessor makes them with PIL: the longer side
resized to `longest_edge`, both sides up to multiples of the tile size, cut into tiles row by row, and the
whole image resized to one tile last; then rescaled and normalized. Every frame is one tile's size, so
none is padded."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from trtserve.engine.vision import ImageProcessing

MAX_IMAGE_SIZE = 4096  # HF's bound on the first resize


def _longest_edge_size(w: int, h: int, longest: int) -> tuple[int, int]:
    """HF's resize to the longest edge (the other side even), then below MAX_IMAGE_SIZE; (width, height)."""
    aspect = w / h
    if w >= h:
        w, h = longest, int(longest / aspect)
        h += h % 2
    else:
        w, h = int(longest * aspect), longest
        w += w % 2
    w, h = max(w, 1), max(h, 1)
    aspect = w / h
    if w >= h and w > MAX_IMAGE_SIZE:
        w, h = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE / aspect)
    elif h > w and h > MAX_IMAGE_SIZE:
        w, h = int(MAX_IMAGE_SIZE * aspect), MAX_IMAGE_SIZE
    return max(w, 1), max(h, 1)


def _tile_multiple_size(w: int, h: int, tile: int) -> tuple[int, int]:
    """HF's resize_for_vision_encoder: both sides up to multiples of the tile; (width, height)."""
    aspect = w / h
    if w >= h:
        w = math.ceil(w / tile) * tile
        h = math.ceil(int(w / aspect) / tile) * tile
    else:
        h = math.ceil(h / tile) * tile
        w = math.ceil(int(h * aspect) / tile) * tile
    return w, h


def to_tiles(img: Image.Image, p: ImageProcessing) -> tuple[np.ndarray, tuple[int, int]]:
    """(frames, 3, tile, tile) float32 and the (rows, cols) of tiles before the whole image ((0, 0): none)."""
    tile = p.height
    if p.longest_edge is not None:
        img = img.resize(_longest_edge_size(*img.size, p.longest_edge), resample=p.resample)
    grid = (0, 0)
    if not p.split:
        frames = [img.resize((tile, tile), resample=p.resample)]
    else:
        img = img.resize(_tile_multiple_size(*img.size, tile), resample=p.resample)
        w, h = img.size
        frames = [img]
        if w > tile or h > tile:
            grid = (h // tile, w // tile)
            frames = [
                img.crop((c * tile, r * tile, (c + 1) * tile, (r + 1) * tile))
                for r in range(grid[0])
                for c in range(grid[1])
            ]
            frames.append(img.resize((tile, tile), resample=p.resample))
    x = np.stack([np.asarray(f, dtype=np.float64) for f in frames]) * p.rescale  # (frames, tile, tile, 3)
    x = x.astype(np.float32)
    mean, std = np.asarray(p.mean, np.float32), np.asarray(p.std, np.float32)
    return np.ascontiguousarray(((x - mean) / std).transpose(0, 3, 1, 2)), grid
