"""Images on the serving side without a model (docs/vision.md): the KServe infer call's image tensor split
over its prompts, the image limits from the run config and `trtserve run`'s flags, and the vision encoder
cache's series on /metrics read from EngineStats."""

from __future__ import annotations

import click
import numpy as np
import pytest
from click.testing import CliRunner

from trtserve.cli.image_limits import image_limit_options, pop_image_limits
from trtserve.engine.errors import UserError
from trtserve.engine.stats import EngineStats, VisionStats
from trtserve.serve.config import load_serve_config
from trtserve.serve.errors import APIError
from trtserve.serve.images import ImageSource
from trtserve.serve.kserve.infer import infer_call
from trtserve.serve.telemetry.metrics import Metrics


def _bytes(*values) -> np.ndarray:
    return np.array(values, dtype=np.object_)


def test_an_image_tensor_is_split_evenly_over_the_prompts_row_major():
    one = infer_call(
        {"text_input": _bytes(b"a <image><image>"), "image_bytes_input": _bytes(b"x", b"y")}, {}, None, "m"
    )
    assert one.images == [[ImageSource(data=b"x"), ImageSource(data=b"y")]]
    two = {"text_input": _bytes(b"a", b"b"), "image_url_input": _bytes([b"data:1"], [b"data:2"])}
    assert infer_call(two, {}, None, "m").images == [[ImageSource(url="data:1")], [ImageSource(url="data:2")]]
    assert infer_call({"text_input": _bytes(b"a")}, {}, None, "m").images == []


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"text_input": _bytes(b"a", b"b"), "image_bytes_input": _bytes(b"x")}, "1 images for 2 prompts"),
        (
            {"text_input": _bytes(b"a"), "image_bytes_input": _bytes(b"x"), "image_url_input": _bytes(b"data:")},
            "one input, image_bytes_input or image_url_input",
        ),
        (
            {"text_input": _bytes(b"a"), "image_bytes_input": np.zeros(3, np.uint8)},
            "'image_bytes_input' data-type is 'UINT8', but model 'm' expects 'BYTES'",
        ),
    ],
)
def test_image_tensors_that_do_not_fit_are_400s(tensors, message):
    with pytest.raises(APIError, match=message) as e:
        infer_call(tensors, {}, None, "m")
    assert e.value.status == 400


def _flags(*argv: str) -> dict | None:
    """What `trtserve run`'s image limit flags give, parsed by click."""
    seen = {}

    @click.command()
    @image_limit_options
    def cmd(**flags):
        seen["limits"] = pop_image_limits(flags)
        assert not flags  # every image flag is taken out

    result = CliRunner().invoke(cmd, list(argv))
    assert result.exit_code == 0, result.output
    return seen["limits"]


def test_image_limits_come_from_the_yaml_with_flags_on_top(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("image_limits:\n  max_images: 1\n  max_bytes: 1MiB\n")
    assert _flags() is None
    flags = _flags("--max-images", "3", "--max-image-pixels", "1000")
    limits = load_serve_config(config, {"image_limits": flags}).image_limits
    assert (limits.max_images, limits.max_bytes, limits.max_pixels) == (3, 1 << 20, 1000)
    assert load_serve_config(None, {}).image_limits.max_images == 8
    with pytest.raises(UserError, match="image_limits.max_bytes"):
        load_serve_config(None, {"image_limits": _flags("--max-image-bytes", "lots")})
    with pytest.raises(UserError, match="image_limits.max_pixels"):
        load_serve_config(None, {"image_limits": {"max_pixels": 0}})


def test_the_encoder_cache_series_read_the_engine_s_vision_stats():
    vision = VisionStats(encoded=3, cache_hits=5, cache_misses=3, cached_images=2, cached_bytes=4096)
    text = Metrics("llava", lambda: EngineStats(vision=vision)).render().decode()
    label = '{model="llava",version="1"}'
    for name, value in {
        "trtserve_vision_images_encoded_total": 3,
        "trtserve_vision_encoder_cache_hits_total": 5,
        "trtserve_vision_encoder_cache_misses_total": 3,
        "trtserve_vision_encoder_cache_images": 2,
        "trtserve_vision_encoder_cache_bytes": 4096,
    }.items():
        assert f"{name}{label} {float(value)}" in text
