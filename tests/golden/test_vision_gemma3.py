"""Gemma 3 vision (docs/vision.md): greedy tokens equal HF transformers' Gemma3ForConditionalGeneration on a
tiny random checkpoint made here (SigLIP tower, pooling projector, sliding and global layers), with 0, 1 and
2 images a prompt, alone and batched with text-only prompts; an image's rows attend to each other both ways
at prefill, so chunked prefill never splits one, and a prefix-cache hit may end inside one."""

from __future__ import annotations

import numpy as np
import pytest
from vision_goldens import build, hf_greedy, images_for, make_gemma3, prompt_with, run

from trtserve import LLM
from trtserve.engine.errors import UserError
from trtserve.engine.manifest import read_manifest
from trtserve.engine.request_options import RequestOptions
from trtserve.vision.prompt import expand_images


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma3")
    src = make_gemma3(d / "hf")
    return src, build(src, d / "engine")


def test_prompt_and_pixels_equal_hf_processor(gemma3):
    from transformers import AutoTokenizer, Gemma3ImageProcessorPil, Gemma3Processor
    from vision_goldens import random_image

    src, engine = gemma3
    vision = read_manifest(engine).vision
    tok = AutoTokenizer.from_pretrained(
        src, boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>"
    )
    proc = Gemma3Processor(Gemma3ImageProcessorPil.from_pretrained(src), tok, image_seq_length=4)
    text = "Look<start_of_image>and<start_of_image>ok"
    out = proc(text=text, images=[[random_image(1), random_image(2)]], return_tensors="np")
    images = tuple(images_for(engine, [1, 2]))
    assert tok(expand_images(text, vision, images))["input_ids"] == out["input_ids"][0].tolist()
    np.testing.assert_allclose(np.stack([i.pixels for i in images]), out["pixel_values"], atol=1e-5)


def _prompts(engine):
    a, b, c = images_for(engine, [1, 2, 3])
    return [
        (prompt_with(engine, [], seed=10, text_len=20), []),
        (prompt_with(engine, [a], seed=11), [a]),
        (prompt_with(engine, [b, c], seed=12), [b, c]),
        (prompt_with(engine, [c, a], seed=13, text_len=3), [c, a]),
        (prompt_with(engine, [], seed=14, text_len=7), []),
    ]


def test_greedy_equals_hf_alone_batched_and_chunked(gemma3):
    src, engine = gemma3
    prompts = _prompts(engine)
    expected = hf_greedy(src, prompts)
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=False)
    assert [run(llm, [p])[0][0] for p in prompts] == expected, "alone"
    assert run(llm, prompts)[0] == expected, "batched with text-only prompts"
    chunked = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=6, enable_prefix_caching=False)
    assert run(chunked, prompts)[0] == expected, "chunked prefill, never inside an image"


def test_prompt_logprobs_equal_hf_with_two_way_image_attention(gemma3):
    """Greedy tokens of a tiny model barely feel the two-way attention; the prompt's logprobs do."""
    import torch
    from transformers import Gemma3ForConditionalGeneration

    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    src, engine = gemma3
    images = tuple(images_for(engine, [2, 3]))
    ids = prompt_with(engine, list(images), seed=12)
    model = Gemma3ForConditionalGeneration.from_pretrained(src, dtype=torch.float32).eval()
    x = torch.tensor([ids])
    pixels = torch.from_numpy(np.stack([i.pixels for i in images]))
    with torch.inference_mode():
        both = model(input_ids=x, pixel_values=pixels, token_type_ids=(x == model.config.image_token_index).long())
        causal = model(input_ids=x, pixel_values=pixels)

    def picked(logits):  # each prompt token's logprob given the tokens before it
        return logits[0, :-1].log_softmax(-1).gather(1, x[0, 1:, None])[:, 0].numpy()

    expected = picked(both.logits)
    assert np.abs(picked(causal.logits) - expected).max() > 1e-3  # what the test tells apart
    llm = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=6, enable_prefix_caching=False)
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    llm.core.add_request(GenerateRequest(ids, params, RequestOptions(images=images)))
    deltas = []
    while llm.core.has_unfinished():
        deltas += llm.core.step()
    got = np.array([lp.logprob for lp in deltas[0].prompt_logprobs[1:]])
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_a_chunk_ends_outside_an_image(gemma3):
    _, engine = gemma3
    (a,) = images_for(engine, [1])
    p = prompt_with(engine, [a], seed=11)  # 9 text tokens, "\n\n" (one token), <start_of_image>, rows at 11..14
    llm = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=14, enable_prefix_caching=False)
    core = llm.core
    from vision_goldens import GREEDY

    from trtserve.engine.messages import GenerateRequest

    core.add_request(GenerateRequest(p, GREEDY, RequestOptions(images=(a,))))
    (r,) = core.scheduler.waiting
    assert [core.engine.vision.chunk_tokens(r, 0, n) for n in (11, 12, 14, 15)] == [11, 11, 11, 15]
    assert core.engine.vision.chunk_tokens(r, 13, 1) == 0  # inside it: only the whole rest may run
    with pytest.raises(UserError, match="max_num_tokens 3 is below the 4 tokens of one image"):
        LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=3)


def test_prefix_cache_hit_inside_an_image_and_never_for_another(gemma3):
    src, engine = gemma3
    a, b = images_for(engine, [5, 6])
    p = prompt_with(engine, [a], seed=20, text_len=44)  # rows at 46..49: block 3 (16 tokens) starts inside
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=True)
    first, _ = run(llm, [(p, [a])])
    again, cached = run(llm, [(p, [a])])
    assert again == first and cached[0] == 48
    other, cached = run(llm, [(p, [b])])
    assert cached[0] == 0
    assert [first[0], other[0]] == hf_greedy(src, [(p, [a]), (p, [b])])


def test_manifest_and_inspect_show_the_vision_part(gemma3):
    from trtserve.build.inspect import summarize

    _, engine = gemma3
    m = read_manifest(engine)
    assert m.vision.family == "gemma3" and m.vision.tokens_per_image == 4 and m.vision.bidirectional
    info = summarize(engine)
    assert info["tokens_per_image"] == 4 and info["vision_parameters"] == m.vision.vision_parameters > 0
