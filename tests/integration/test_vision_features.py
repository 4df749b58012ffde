"""Engine features with images in the prompt (docs/vision.md, "Works with"), on a tiny random LLaVA made
here: the KV second tier restores an image's blocks and never serves another image's; LoRA on the language
model equals HF transformers + PEFT, and an adapter on the vision tower is refused; n-gram speculation
and guided decoding leave greedy output as it was. Chunked prefill across an image is in
tests/golden/test_vision_llava.py; structured outputs and receipts over HTTP in
tests/api/test_vision_features_live.py."""

from __future__ import annotations

import re

import pytest
import torch
from golden.vision_goldens import GREEDY, NEW_TOKENS, build, hf_greedy, images_for, make_llava, prompt_with

from trtserve import LLM
from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.engine.vision import ImageInput
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine

pytest.importorskip("peft")
pytestmark = pytest.mark.timeout(600)

LM_ONLY = r".*language_model.*\.(q_proj|v_proj|o_proj)"  # PEFT's regex: the language model's modules alone


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    d = tmp_path_factory.mktemp("vision-features")
    src = make_llava(d / "hf", text="llama", tower="clip", layer=-2, select="default")
    return src, build(src, d / "engine")


def _run(core: EngineCore, prompts, params: SamplingParams = GREEDY, **options) -> tuple[list[list[int]], list[int]]:
    """Each (prompt, images)'s tokens, all queued together, and its prompt tokens served from a cache."""
    reqs = [GenerateRequest(ids, params, RequestOptions(images=tuple(imgs), **options)) for ids, imgs in prompts]
    for r in reqs:
        core.add_request(r)
    tokens = {r.request_id: [] for r in reqs}
    cached = {}
    while core.has_unfinished():
        for d in core.step():
            assert d.error is None, d.error
            tokens[d.request_id] += d.token_ids
            cached[d.request_id] = d.num_cached_tokens
    core.blocks.check_invariants()
    return [tokens[r.request_id] for r in reqs], [cached[r.request_id] for r in reqs]


def test_kv_offload_restores_an_images_blocks_and_never_another_images(llava, tmp_path):
    src, engine = llava
    a, b, c = images_for(engine, [1, 2, 3])
    p = prompt_with(engine, [a], seed=20, text_len=40)  # 61 tokens, the same ids whichever image
    filler = prompt_with(engine, [c], seed=21, text_len=40)
    want_a, want_b, want_c = hf_greedy(src, [(p, [a]), (p, [b]), (filler, [c])])
    loaded = load_engine(engine, device="cpu")
    tier = KVOffloadConfig(bytes=1 << 20, path=tmp_path)

    def core() -> EngineCore:  # 6 blocks of 16 tokens: one request's, so the next evicts its blocks
        return EngineCore(loaded, RuntimeConfig(kv_offload=tier), num_blocks=6)

    first = core()
    assert _run(first, [(p, [a])]) == ([want_a], [0])
    _run(first, [(filler, [c])])
    assert _run(first, [(p, [a])]) == ([want_a], [48]), "restored from the second tier"
    assert first.stats().kv_tier.restores > 0
    _run(first, [(filler, [c])])
    restores = first.stats().kv_tier.restores
    assert _run(first, [(p, [b])]) == ([want_b], [0]), "another image, the same token ids: nothing restored"
    assert first.stats().kv_tier.restores == restores
    first.close()

    again = core()  # a restart on the same tier: its index keys each block by its image too
    assert _run(again, [(p, [b])]) == ([want_b], [48])
    assert _run(again, [(filler, [c]), (p, [a])])[0] == [want_c, want_a]
    again.close()


def _peft_adapter(src, dest, targets, seed: int = 0):
    """A random PEFT LoRA adapter (B random too) on the whole LlavaForConditionalGeneration."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
    torch.manual_seed(seed)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False, lora_dropout=0.0)
    get_peft_model(model, cfg).save_pretrained(dest)
    return dest


def _peft_greedy(src, adapter, prompts: list[tuple[list[int], list[ImageInput]]]) -> list[list[int]]:
    from peft import PeftModel
    from transformers import LlavaForConditionalGeneration

    base = LlavaForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter).eval()
    outs = []
    with torch.inference_mode():
        for ids, imgs in prompts:
            x = torch.tensor([ids])
            pixels = {"pixel_values": torch.stack([torch.from_numpy(i.pixels) for i in imgs])} if imgs else {}
            out = model.generate(
                input_ids=x, attention_mask=torch.ones_like(x), **pixels, max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
            outs.append(out[0, len(ids) :].tolist())
    return outs


def test_lora_on_the_language_model_equals_hf_peft_with_images(llava, tmp_path):
    src, engine = llava
    a, b = images_for(engine, [1, 2])
    prompts = [
        (prompt_with(engine, [a], seed=30), [a]),
        (prompt_with(engine, [b, a], seed=31), [b, a]),
        (prompt_with(engine, [], seed=32, text_len=20), []),
    ]
    adapter = _peft_adapter(src, tmp_path / "lm", LM_ONLY)
    want = _peft_greedy(src, adapter, prompts)
    assert want != hf_greedy(src, prompts), "an adapter that changes nothing tests nothing"
    llm = LLM(engine, lora={"adapters": {"lm": str(adapter)}}, kv_cache_memory=16 << 20)
    ref = llm.core.lora.ref("lm")
    assert _run(llm.core, prompts, adapter=ref)[0] == want, "batched"
    assert _run(llm.core, prompts[:1], adapter=ref) == ([want[0]], [16]), "its prefix reused under the adapter"
    assert _run(llm.core, prompts[:1])[1] == [0], "never by the base model"
    packed = LLM(build(src, tmp_path / "packed", lora={"lm": str(adapter)}), kv_cache_memory=16 << 20)
    assert _run(packed.core, prompts, adapter=packed.core.lora.ref("lm"))[0] == want, "packed by build --lora"


def test_an_adapter_on_the_vision_tower_is_refused_in_one_sentence(llava, tmp_path):
    src, engine = llava
    adapter = _peft_adapter(src, tmp_path / "both", ["q_proj", "v_proj"])  # matches the tower's q_proj too
    with pytest.raises(UserError, match="vision tower") as err:
        LLM(engine, lora={"adapters": {"both": str(adapter)}}, kv_cache_memory=16 << 20)
    assert "language model" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match="vision tower"):
        build(src, tmp_path / "packed", lora={"both": str(adapter)})


def test_ngram_speculation_with_an_image_equals_plain_greedy(llava):
    _, engine = llava
    (a,) = images_for(engine, [4])
    loop = [7, 8, 9, 10, 11, 12] * 4  # text the n-gram lookup can propose from
    p = prompt_with(engine, [a], seed=40)
    prompts = [(loop + p, [a]), (p + loop, [a])]
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "max_batch_size": 8}
    llm = LLM(engine, speculative=ngram, kv_cache_memory=16 << 20)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    plain = LLM(engine, kv_cache_memory=16 << 20)
    assert _run(llm.core, prompts, params)[0] == _run(plain.core, prompts, params)[0]
    assert llm.core.stats().spec.draft_tokens > 0  # it did speculate


def test_guided_decoding_with_an_image_is_valid_and_chunking_does_not_change_it(llava):
    _, engine = llava
    (a,) = images_for(engine, [5])
    p = prompt_with(engine, [a], seed=50)
    regex = r"[a-f]{2,6}( [a-f]{2,6}){1,3}"
    params = SamplingParams(max_tokens=30, temperature=0.0, guided=GuidedDecoding(kind="regex", spec=regex))
    whole = LLM(engine, kv_cache_memory=16 << 20)
    chunked = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=16)  # cuts the image's 16 rows in two
    out = _run(whole.core, [(p, [a])], params)[0][0]
    text = whole.tokenizer.decode([t for t in out if t not in whole.engine.eos_token_ids])
    assert re.fullmatch(regex, text), text
    assert _run(chunked.core, [(p, [a])], params)[0][0] == out
