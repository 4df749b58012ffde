"""`trtserve run`'s image limit flags: the run config's `image_limits` section (docs/vision.md), merged over
the YAML's."""

from __future__ import annotations

import click

# flag -> (the image_limits key it sets, its type, its help)
FLAGS = {
    "--max-images": ("max_images", int, "Images one request may send [8]."),
    "--max-image-bytes": ("max_bytes", str, "Bytes of one encoded image, e.g. 20MiB [20MiB]."),
    "--max-image-pixels": ("max_pixels", int, "Width x height of one image, read before decoding [16777216]."),
}


def image_limit_options(f):
    for flag, (key, kind, help_text) in reversed(FLAGS.items()):  # click lists the last decorator first
        f = click.option(flag, f"image_{key}", type=kind, help=help_text)(f)
    return f


def pop_image_limits(flags: dict) -> dict | None:
    """The image_limits overrides the flags gave (taken out of `flags`); None: none given."""
    given = {key: flags.pop(f"image_{key}") for key, _, _ in FLAGS.values()}
    return {k: v for k, v in given.items() if v is not None} or None
