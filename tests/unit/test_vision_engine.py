"""The engine's image parts without a model: where each image's rows lie in a prompt, the text-only
engine's refusal, and prefix-cache keys apart by image content (the same image's chain is the same)."""

from __future__ import annotations

import numpy as np
import pytest

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.vision import ImageInput
from trtserve.runtime.features.vision import NoVision, image_spans
from trtserve.runtime.prefix_scope import PrefixScope, block_key, chain_root


def _img(seed: int, tokens: int = 3) -> ImageInput:
    return ImageInput(pixels=np.full((3, 4, 4), seed, np.float32), num_tokens=tokens)


def test_image_rows_are_found_in_prompt_order():
    assert image_spans([5, 9, 9, 9, 6, 9, 9, 9], 9, (_img(1), _img(2))) == [[1], [5]]
    tiled = ImageInput(pixels=np.zeros((2, 3, 4, 4), np.float32), num_tokens=4)  # two frames, a run each
    assert image_spans([9, 9, 5, 9, 9, 6, 9, 9, 9], 9, (tiled, _img(3))) == [[0, 3], [6]]
    with pytest.raises(UserError, match="holds 2 image tokens"):
        image_spans([5, 9, 9], 9, (_img(1),))
    with pytest.raises(UserError, match="contiguous"):
        image_spans([9, 5, 9, 9], 9, (_img(1),))


def test_a_text_only_engine_refuses_images():
    req = GenerateRequest([1, 2], SamplingParams(), RequestOptions(images=(_img(1),)))
    with pytest.raises(UserError, match="text-only"):
        NoVision().check(req)
    NoVision().check(GenerateRequest([1, 2], SamplingParams()))


def test_prefix_keys_part_by_image_content():
    tokens = [9] * 16
    same = [block_key(chain_root("fp", PrefixScope(images=(_img(1).content_hash,))), tokens) for _ in range(2)]
    other = block_key(chain_root("fp", PrefixScope(images=(_img(2).content_hash,))), tokens)
    text = block_key(chain_root("fp", PrefixScope()), tokens)
    assert same[0] == same[1] != other and text not in (same[0], other)
    # a text-only prompt's root is what it was before images existed (KV tiers on disk stay valid)
    import hashlib
    import json

    old = hashlib.blake2b(json.dumps(["fp", "", None, None, None]).encode(), digest_size=16).digest()
    assert chain_root("fp", PrefixScope()) == old


@pytest.mark.parametrize(
    "arch", ["SmolVLMForConditionalGeneration", "LlavaNextForConditionalGeneration", "Qwen2VLForConditionalGeneration"]
)
def test_vision_architectures_not_run_yet_are_refused_in_one_sentence(arch):
    from trtserve.models.vision_family import vision_family

    with pytest.raises(UserError, match=f"{arch} .* is not supported yet; .* LlavaForConditionalGeneration"):
        vision_family([arch])
    assert vision_family(["LlamaForCausalLM"]) is None


def test_rows_of_a_two_way_span_see_each_other_and_nothing_later():
    from trtserve.models.batch import SeqChunk, make_batch

    seq = SeqChunk(tokens=[5] * 6, start=0, block_table=[0], bidirectional=((1, 4),))
    (g,) = make_batch([seq], tokens_per_block=16).groups
    expected = np.tril(np.ones((6, 16), bool))
    expected[1:4, 1:4] = True  # positions 1..3 see each other both ways
    assert (g.attn_mask()[0, 0].numpy() == expected).all()
    assert g.fresh == ()  # no unmasked causal call for it
