"""LLaVA (docs/vision.md): greedy tokens equal HF transformers' LlavaForConditionalGeneration on tiny random
checkpoints made here, with 0, 1 and 2 images a prompt, alone and batched with text-only prompts, with
chunked prefill splitting images, and the prefix cache reusing the same image but never another one."""

from __future__ import annotations

import pytest
from vision_goldens import build, hf_greedy, images_for, make_llava, prompt_with, run

from trtserve import LLM
from trtserve.engine.manifest import read_manifest

VARIANTS = {
    "llama-clip": dict(text="llama", tower="clip", layer=-2, select="default"),
    "qwen2-siglip-layers": dict(text="qwen2", tower="siglip", layer=[-3, -1], select="full"),
    "mistral-clip-full": dict(text="mistral", tower="clip", layer=-1, select="full"),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def llava(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    src = make_llava(d / "hf", **VARIANTS[request.param])
    return src, build(src, d / "engine")


def _prompts(engine):
    a, b, c = images_for(engine, [1, 2, 3])
    return [
        (prompt_with(engine, [], seed=10, text_len=20), []),
        (prompt_with(engine, [a], seed=11), [a]),
        (prompt_with(engine, [b, c], seed=12), [b, c]),
        (prompt_with(engine, [c, a], seed=13, text_len=3), [c, a]),
        (prompt_with(engine, [], seed=14, text_len=7), []),
    ]


def test_greedy_equals_hf_alone_batched_and_chunked(llava):
    src, engine = llava
    prompts = _prompts(engine)
    expected = hf_greedy(src, prompts)
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=False)
    assert [run(llm, [p])[0][0] for p in prompts] == expected, "alone"
    assert run(llm, prompts)[0] == expected, "batched with text-only prompts"
    chunked = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=16, enable_prefix_caching=False)
    assert run(chunked, prompts)[0] == expected, "chunked prefill (images split across steps)"
    vision = chunked.core.engine.vision.stats()
    assert vision.encoded == 3 and vision.cache_misses == 3  # each image encoded once, whatever the chunks
    assert vision.cache_hits == 2  # a and c asked again: from the cache, or shared with a request of that step


def test_an_image_two_requests_of_one_step_share_counts_as_a_hit(llava):
    _, engine = llava
    (a,) = images_for(engine, [7])
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=False)
    run(llm, [(prompt_with(engine, [a], seed=30), [a]), (prompt_with(engine, [a], seed=31), [a])])
    vision = llm.core.engine.vision.stats()
    assert (vision.encoded, vision.cache_misses, vision.cache_hits) == (1, 1, 1)


def test_prefix_cache_reuses_the_same_image_never_another(llava):
    src, engine = llava
    a, b = images_for(engine, [5, 6])
    p = prompt_with(engine, [a], seed=20, text_len=40)  # same token ids for either image
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=True)
    first, _ = run(llm, [(p, [a])])
    again, cached = run(llm, [(p, [a])])
    assert again == first and cached[0] > 0, "the same image reuses its blocks"
    other, cached = run(llm, [(p, [b])])
    assert cached[0] == 0, "another image with the same token ids never does"
    assert [first[0], other[0]] == hf_greedy(src, [(p, [a]), (p, [b])])
    stats = llm.core.engine.vision.stats()
    assert stats.encoded == 2  # the second request with image a ran from cached blocks: no encode


def test_manifest_records_the_vision_part(llava):
    _, engine = llava
    m = read_manifest(engine)
    assert m.vision is not None and m.vision.family == "llava"
    assert (engine / "vision.safetensors").is_file() and "vision.safetensors" in m.files
    assert (engine / "tokenizer" / "preprocessor_config.json").is_file()
    assert m.vision.tokens_per_image == 16 + (1 if m.vision.tower.kind == "clip" else 0) - (
        m.vision.tower.select == "default"
    )


def test_inspect_shows_the_vision_part_and_other_backends_are_refused(llava, tmp_path):
    from trtserve.build.builder import plan_build
    from trtserve.build.config import BuildConfig
    from trtserve.build.inspect import summarize
    from trtserve.engine.errors import UserError

    src, engine = llava
    info = summarize(engine)
    m = read_manifest(engine)
    assert info["tokens_per_image"] == m.vision.tokens_per_image and info["vision_parameters"] > 0
    assert info["weight_bytes"] == m.files["model.safetensors"].size + m.files["vision.safetensors"].size
    with pytest.raises(UserError, match="torch backend only"):
        plan_build(BuildConfig(model=str(src), backend="tensorrt"))
