"""The kv_cache_dtype engine option: a float32 engine's KV cache in float16 or bfloat16. The cache holds the keys
and values the float32 cache holds, rounded to 16 bits; it takes half the bytes a block, so a budget holds twice
the blocks; served, `trtserve run --kv-cache-dtype` answers the official client; and what cannot honour it is
refused with the fix."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from helpers import make_hf_model, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.cli import main
from trtserve.engine.errors import UserError

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=1)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    d = tmp_path_factory.mktemp("kvdtype")
    src = make_hf_model(d / "hf", "llama", seed=11, dtype=torch.float32)
    build_engine(BuildConfig(model=str(src), tokens_per_block=8), d / "engine", quiet=True)
    return d / "engine"


def _cache(llm: LLM) -> torch.Tensor:
    return llm.core.runner.kv.data


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_the_cache_holds_the_float32_keys_and_values_rounded(engine, name):
    """Prefill writes the keys and values of the float32 cache into the 16-bit one, rounded, at the same slots;
    greedy decoding over the rounded cache stays with the float32 one here, its logprobs close."""
    prompts = random_prompts(3, seed=5, lo=20, hi=40)
    wide = LLM(engine, kv_cache_memory=4 << 20, enable_prefix_caching=False)
    narrow = LLM(engine, kv_cache_memory=4 << 20, enable_prefix_caching=False, kv_cache_dtype=name)
    dtype = getattr(torch, name)
    assert _cache(wide).dtype == torch.float32 and _cache(narrow).dtype == dtype
    # a prompt alone and no decode: the slots it wrote are the same in both, and nothing else is
    for llm in (wide, narrow):
        _cache(llm).zero_()
        llm.generate([prompts[0]], SamplingParams(max_tokens=1, temperature=0.0))
    slots = [_cache(llm).ne(0).any(dim=(0, 1, 3, 4)).nonzero().flatten() for llm in (wide, narrow)]
    assert len(slots[0]) == len(prompts[0]) and torch.equal(slots[0], slots[1])
    got, want = _cache(narrow)[:, :, slots[1]], _cache(wide)[:, :, slots[0]].to(dtype)
    # layer 0's keys and values come from the embeddings alone: bit for bit. Later layers' come after attention,
    # which reads the cache (fresh prompts and cached prefixes alike), so they carry its rounding
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0.05)
    a = wide.generate(prompts, GREEDY)
    b = narrow.generate(prompts, GREEDY)
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        lp, lq = (torch.tensor([t.logprob for t in o.outputs[0].logprobs]) for o in (x, y))  # the chosen tokens'
        torch.testing.assert_close(lq, lp, rtol=0, atol=5e-2 if name == "bfloat16" else 5e-3)
        assert not torch.equal(lq, lp) or name == "float16"  # bfloat16's 8 bits show in the logprobs


def test_a_budget_holds_twice_the_blocks_and_every_block_comes_back(engine):
    wide = LLM(engine, kv_cache_memory=2 << 20)
    narrow = LLM(engine, kv_cache_memory=2 << 20, kv_cache_dtype="float16")
    assert narrow.core.kv_block_bytes * 2 == wide.core.kv_block_bytes
    assert narrow.core.blocks.num_blocks == 2 * wide.core.blocks.num_blocks
    narrow.generate(random_prompts(4, seed=2, lo=10, hi=30), GREEDY)
    assert narrow.core.blocks.num_free_blocks == narrow.core.blocks.num_blocks  # none leaked


def test_prefix_hits_and_speculation_give_the_tokens_of_a_cold_plain_run(engine):
    """Attention reads the rounded cache for a prompt's own keys as for cached ones, so a prefix hit (its keys read
    back from blocks) gives the tokens of a cold run; n-gram speculation's verification rows (the one-call step)
    give the plain decode's."""
    shared = random_prompts(1, seed=9, lo=40, hi=41)[0]
    prompts = [shared + [7, 8, 9, 10], shared + [11, 12], [5, 6, 7, 8, 9] * 6]
    p = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    cold = LLM(engine, kv_cache_memory=4 << 20, enable_prefix_caching=False, kv_cache_dtype="float16")
    want = [o.token_ids for o in cold.generate(prompts, p)]
    warm = LLM(engine, kv_cache_memory=4 << 20, kv_cache_dtype="float16")
    warm.generate([shared], SamplingParams(max_tokens=1, temperature=0.0))
    got = warm.generate(prompts, p)
    assert [o.token_ids for o in got] == want
    assert got[0].num_cached_tokens >= 32  # whole blocks of the shared prefix came from the cache
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "max_batch_size": 8}
    spec = LLM(engine, kv_cache_memory=4 << 20, kv_cache_dtype="float16", speculative=ngram)
    assert [o.token_ids for o in spec.generate(prompts, p)] == want
    assert spec.core.stats().spec.accepted_tokens > 0  # proposals were verified and kept: a real test
    assert spec.core.blocks.stats().used == 0


def test_what_cannot_honour_it_is_refused_with_the_fix(tmp_path, engine):
    src = make_hf_model(tmp_path / "hf", "llama", seed=3, dtype=torch.bfloat16)
    bf16 = tmp_path / "bf16"
    build_engine(BuildConfig(model=str(src), tokens_per_block=8), bf16, quiet=True)
    with pytest.raises(UserError, match=r"applies to float32 engines; this engine is bfloat16.*remove kv_cache_dtype"):
        LLM(bf16, kv_cache_dtype="float16")
    # `trtserve run` refuses before it serves (the engine's config says so; no weights are loaded)
    out = CliRunner().invoke(main, ["run", str(bf16), "--kv-cache-dtype", "float16"])
    assert out.exit_code != 0 and "applies to float32 engines; this engine is bfloat16" in out.output
    assert _cache(LLM(bf16, kv_cache_dtype="bfloat16")).dtype == torch.bfloat16  # its own dtype: nothing to do
    int8_kv = tmp_path / "int8kv"
    build_engine(
        BuildConfig(model=str(src), tokens_per_block=8, quant="w8a16", kv_cache_quant="int8"), int8_kv, quiet=True
    )
    with pytest.raises(UserError, match=r"built with an 8-bit KV cache \(INT8\).*--kv-cache-quant"):
        LLM(int8_kv, kv_cache_dtype="bfloat16")
    with pytest.raises(Exception, match="kv_cache_dtype"):
        LLM(engine, kv_cache_dtype="int4")


def test_served_with_the_flag_the_official_client_gets_its_tokens(engine, tmp_path):
    openai = pytest.importorskip("openai")
    from api.conftest import Server

    offline = LLM(engine, kv_cache_dtype="float16", kv_cache_memory=4 << 20)
    want = offline.generate(["The sea"], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), chat=False)
    s = Server(engine, "--kv-cache-memory", "4MiB", "--kv-cache-dtype", "float16", log=tmp_path / "server.log")
    try:
        client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="none", timeout=30, max_retries=0)
        r = client.completions.create(model=engine.name, prompt="The sea", max_tokens=8, temperature=0.0)
        assert r.choices[0].text == want[0].text
        assert s.metric("trtserve_kv_cache_total_blocks") == offline.core.blocks.num_blocks
    finally:
        s.stop()
