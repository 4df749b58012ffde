"""GGUF input: llama.cpp's q/k permutation is undone, so greedy output equals the HF model."""

from __future__ import annotations

from helpers import hf_greedy, make_hf_model, random_prompts, write_gguf

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig


def test_gguf_build_equals_hf_source(tmp_path):
    src = make_hf_model(tmp_path / "hf", "llama", seed=11)
    gguf_file = write_gguf(src, tmp_path / "tiny.gguf")
    out = tmp_path / "engine"
    build_engine(BuildConfig(model=str(gguf_file), tokens_per_block=16), out, quiet=True)
    prompts = random_prompts(8, seed=4)
    expected = hf_greedy(src, prompts, 32)
    got = LLM(out).generate(prompts, SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True))
    assert [o.token_ids for o in got] == expected
