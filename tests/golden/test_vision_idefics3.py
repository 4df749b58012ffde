"""SmolVLM / Idefics3 (docs/vision.md): images cut into tiles plus the whole image as HF's
Idefics3ImageProcessor does, the prompt text around tiles as its processor writes it, and greedy tokens
equal to HF transformers' Idefics3ForConditionalGeneration on a tiny random checkpoint made here, with 0, 1
and 2 images a prompt, alone and batched with text-only prompts, with chunked prefill splitting images."""

from __future__ import annotations

import numpy as np
import pytest
from vision_goldens import build, hf_greedy, images_for, make_idefics3, prompt_with, random_image, run

from trtserve import LLM
from trtserve.engine.manifest import read_manifest
from trtserve.vision.pixels import image_input
from trtserve.vision.prompt import expand_images

SIZES = [(61, 47), (20, 50), (28, 28), (90, 30)]  # 2x2, 2x1, 1x1 (one frame) and 1x2 tiles


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory):
    d = tmp_path_factory.mktemp("idefics3")
    src = make_idefics3(d / "hf")
    return src, build(src, d / "engine")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("config", ["split", "one-tile", "no-split"])
def test_tiles_equal_hf_image_processor(idefics3, size, config):
    from transformers import Idefics3ImageProcessorPil

    _, engine = idefics3
    vision = read_manifest(engine).vision
    kw = {"split": {}, "one-tile": {"size": {"longest_edge": 28}}, "no-split": {"do_image_splitting": False}}[config]
    hf = Idefics3ImageProcessorPil(**({"size": {"longest_edge": 56}, "max_image_size": {"longest_edge": 28}} | kw))
    processing = vision.processing.model_copy(
        update={"longest_edge": hf.size["longest_edge"], "split": hf.do_image_splitting}
    )
    img = random_image(7, size)
    out = hf(images=[img], return_tensors="np", return_row_col_info=True)
    ours = image_input(img, vision.model_copy(update={"processing": processing}))
    np.testing.assert_allclose(ours.pixels, out["pixel_values"][0], atol=1e-5)
    assert ours.grid == (out["rows"][0][0], out["cols"][0][0])


def test_prompt_equals_hf_processor(idefics3):
    from transformers import AutoTokenizer, Idefics3ImageProcessorPil, Idefics3Processor

    src, engine = idefics3
    vision = read_manifest(engine).vision
    tok = AutoTokenizer.from_pretrained(src)
    proc = Idefics3Processor(Idefics3ImageProcessorPil.from_pretrained(src), tok, image_seq_len=4)
    imgs = [random_image(1, (61, 47)), random_image(2, (28, 28)), random_image(3, (20, 50))]
    text = "Look<image>and<image> then<image>\nok"
    expected = proc(text=text, images=[imgs], return_tensors="np")["input_ids"][0].tolist()
    ours = tok(expand_images(text, vision, tuple(image_input(i, vision) for i in imgs)))["input_ids"]
    assert ours == expected


def _prompts(engine):
    a, b, c = images_for(engine, [1, 2, 3])  # 2x2, 2x2 and 2x2 tiles: seeds, not sizes, differ
    d = image_input(random_image(4, (20, 50)), read_manifest(engine).vision)  # 2x1 tiles
    return [
        (prompt_with(engine, [], seed=10, text_len=20), []),
        (prompt_with(engine, [a], seed=11), [a]),
        (prompt_with(engine, [b, d], seed=12), [b, d]),
        (prompt_with(engine, [c, a], seed=13, text_len=3), [c, a]),
        (prompt_with(engine, [], seed=14, text_len=7), []),
    ]


def test_greedy_equals_hf_alone_batched_and_chunked(idefics3):
    src, engine = idefics3
    prompts = _prompts(engine)
    expected = hf_greedy(src, prompts)
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=False)
    assert [run(llm, [p])[0][0] for p in prompts] == expected, "alone"
    assert run(llm, prompts)[0] == expected, "batched with text-only prompts"
    chunked = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=16, enable_prefix_caching=False)
    assert run(chunked, prompts)[0] == expected, "chunked prefill (tiles split across steps)"
    assert chunked.core.engine.vision.stats().encoded == 4  # each image (all its tiles) encoded once


def test_prefix_cache_reuses_the_same_image_never_another(idefics3):
    src, engine = idefics3
    a, b = images_for(engine, [5, 6])
    p = prompt_with(engine, [a], seed=20, text_len=40)  # both 2x2 tiles: the same token ids
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=True)
    first, _ = run(llm, [(p, [a])])
    again, cached = run(llm, [(p, [a])])
    assert again == first and cached[0] > 0
    other, cached = run(llm, [(p, [b])])
    assert cached[0] == 0
    assert [first[0], other[0]] == hf_greedy(src, [(p, [a]), (p, [b])])


def test_manifest_and_inspect_show_the_vision_part(idefics3):
    from trtserve.build.inspect import summarize

    _, engine = idefics3
    m = read_manifest(engine)
    assert m.vision.family == "idefics3" and m.vision.tokens_per_image == 4 and m.vision.tiles is not None
    info = summarize(engine)
    assert info["vision_parameters"] == m.vision.vision_parameters > 0
    assert info["tokens_per_image"] == 4 and info["image_tiles_max"] == 5  # 2 x 2 tiles and the whole image
    assert info["weight_bytes"] == m.files["model.safetensors"].size + m.files["vision.safetensors"].size
