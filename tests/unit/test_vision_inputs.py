"""trtserve/vision (no torch): decoding and its limits, data: URLs and the URL policy, the pixels the CLIP
and SigLIP processors make, and the image placeholders' expansion."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from trtserve.engine.errors import UserError
from trtserve.engine.vision import ImageInput, ImageProcessing, VisionConfig, VisionTower
from trtserve.vision.decode import decode_image
from trtserve.vision.limits import ImageLimits
from trtserve.vision.pixels import image_input, to_pixels
from trtserve.vision.prompt import expand_images
from trtserve.vision.sources import FLAG, url_bytes

LIMITS = ImageLimits()


def _encoded(fmt: str, size=(40, 30), seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def _vision(tokens=4) -> VisionConfig:
    tower = VisionTower(
        kind="clip", hidden_size=8, intermediate_size=16, num_layers=1, num_heads=2, patch_size=14, image_size=28,
        layer_norm_eps=1e-5, act="quick_gelu", feature_layers=(-2,), select="default",
    )  # fmt: skip
    return VisionConfig(
        family="llava", image_token_id=7, image_token="<image>", tokens_per_image=tokens,
        processing=ImageProcessing(height=28, width=28, shortest_edge=28), tower=tower, projector_act="gelu",
        vision_parameters=0,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_png_jpeg_and_webp_decode(fmt):
    assert decode_image(_encoded(fmt), LIMITS).size == (40, 30)


@pytest.mark.parametrize("data", [b"not an image", _encoded("PNG")[:60], _encoded("GIF")])
def test_malformed_truncated_or_other_formats_are_refused_by_name(data):
    with pytest.raises(UserError, match="PNG, JPEG or WebP"):
        decode_image(data, LIMITS)


def test_limits_name_the_limit():
    with pytest.raises(UserError, match="exceeds the limit of 100 bytes"):
        decode_image(_encoded("PNG"), ImageLimits(max_bytes=100))
    with pytest.raises(UserError, match="40x30 pixels exceeds the limit of 1000 pixels"):
        decode_image(_encoded("PNG"), ImageLimits(max_pixels=1000))
    with pytest.raises(UserError, match="at most 2 are allowed"):
        ImageLimits(max_images=2).check_count(3)


def test_data_urls_and_the_url_policy():
    png = _encoded("PNG")
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert url_bytes(url, LIMITS, frozenset()) == png
    with pytest.raises(UserError, match="malformed"):
        url_bytes("data:image/png;base64,@@@", LIMITS, frozenset())
    with pytest.raises(UserError, match="not supported"):
        url_bytes("data:image/gif;base64,AAAA", LIMITS, frozenset())
    with pytest.raises(UserError, match=FLAG):
        url_bytes("https://example.com/cat.png", LIMITS, frozenset())
    with pytest.raises(UserError, match="not allowed"):
        url_bytes("https://evil.example/cat.png", LIMITS, frozenset({"example.com"}))
    with pytest.raises(UserError, match="data: URL"):
        url_bytes("file:///etc/passwd", LIMITS, frozenset({"example.com"}))


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_pixels_equal_hf_image_processors(kind):
    from transformers import CLIPImageProcessorPil, SiglipImageProcessorPil

    img = decode_image(_encoded("PNG", size=(61, 47)), LIMITS)
    if kind == "clip":
        hf = CLIPImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
        proc = ImageProcessing(height=28, width=28, shortest_edge=28)
    else:
        hf = SiglipImageProcessorPil(size={"height": 28, "width": 28})
        proc = ImageProcessing(height=28, width=28, mean=(0.5,) * 3, std=(0.5,) * 3)
    expected = hf(images=img, return_tensors="np")["pixel_values"][0]
    np.testing.assert_allclose(to_pixels(img, proc), expected, atol=1e-5)


def test_placeholders_expand_to_the_tokens_per_image():
    v = _vision(tokens=3)
    two = (ImageInput(pixels=np.zeros((3, 28, 28), np.float32), num_tokens=3),) * 2
    assert expand_images("a<image>b<image>", v, two) == "a<image><image><image>b<image><image><image>"
    gemma = v.model_copy(update={"row_token": "<s>", "image_prefix": "\n\n<boi>", "image_suffix": "<eoi>\n\n"})
    assert expand_images("u\n<image>", gemma, two[:1]) == "u\n\n\n<boi><s><s><s><eoi>\n\n"
    with pytest.raises(UserError, match="1 image placeholders .* for 2 images"):
        expand_images("a<image>b", v, two)


def test_an_image_input_is_keyed_by_its_pixels():
    v = _vision()
    a = image_input(decode_image(_encoded("PNG", seed=1), LIMITS), v)
    again = image_input(decode_image(_encoded("PNG", seed=1), LIMITS), v)
    other = image_input(decode_image(_encoded("PNG", seed=2), LIMITS), v)
    assert a.pixels.shape == (3, 28, 28) and a.num_tokens == 4
    assert a.content_hash == again.content_hash != other.content_hash
    assert ImageInput(pixels=a.pixels, num_tokens=4).content_hash == a.content_hash
