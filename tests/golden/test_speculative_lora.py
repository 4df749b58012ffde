"""Speculative decoding under LoRA adapters: a batch mixing adapters and the base model, with
proposals verified under each row's adapter, equals HF + PEFT greedy token for token."""

from __future__ import annotations

import pytest
from helpers import hf_greedy, make_hf_model, make_lora_adapter, peft_greedy

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig

pytestmark = pytest.mark.timeout(300)

NEW_TOKENS = 16
PROMPTS = [[5, 6, 7, 8, 9] * 5, [30, 31, 32] * 8]


def test_adapters_with_speculation_equal_peft(tmp_path):
    src = make_hf_model(tmp_path / "hf", "llama", seed=7)
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), tmp_path / "engine", quiet=True)
    adapter = make_lora_adapter(src, tmp_path / "qv", ("q_proj", "v_proj"), 4, 8.0, False, seed=1)
    want = {"qv": peft_greedy(src, adapter, PROMPTS, NEW_TOKENS), None: hf_greedy(src, PROMPTS, NEW_TOKENS)}
    assert want["qv"] != want[None], "an adapter that changes nothing tests nothing"
    llm = LLM(
        tmp_path / "engine",
        lora={"adapters": {"qv": str(adapter)}},
        kv_cache_memory=8 << 20,
        speculative={"method": "ngram", "num_speculative_tokens": 3, "max_batch_size": 8},
    )
    p = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    got = llm.generate(PROMPTS * 2, p, adapter=["qv", "qv", None, None])
    assert [o.token_ids for o in got] == want["qv"] + want[None]
    assert llm.core.stats().spec.accepted_tokens > 0
