"""The KV cache the tiny engine gets: run's CPU default, an explicit budget (as `trtserve inspect`
reports it), offline sizing to the requests with growth, and lazy allocation on CPU.

The tiny engine: 2 layers x 2 KV heads x 16, float32 -> 512 bytes a token, 8 KiB a block of 16
tokens; max_seq_len 256 (16 blocks), max_batch_size 256.
"""

from __future__ import annotations

import psutil
import pytest
from click.testing import CliRunner

from trtserve import LLM, SamplingParams
from trtserve.build.inspect import summarize
from trtserve.cli import main
from trtserve.engine.errors import UserError
from trtserve.engine.run_config import RuntimeConfig
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine

PER_BLOCK = 512 * 16
P = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
SHORT, LONG = list(range(3, 13)), list(range(20, 60))  # 10 and 40 prompt tokens


@pytest.fixture(scope="module")
def loaded(tiny_llama_engine):
    return load_engine(tiny_llama_engine, device="cpu")  # these are the CPU's defaults and memory


def test_run_default_on_cpu_and_inspect_agree(loaded, tiny_llama_engine):
    core = EngineCore(loaded, RuntimeConfig())
    # 256 full-length sequences of 16 blocks (32 MiB) are less than the 4 GiB CPU default
    assert core.blocks.num_blocks == 256 * 16
    assert summarize(tiny_llama_engine)["kv_cache_default_cpu"]["kv_blocks"] == 256 * 16
    assert EngineCore(loaded, RuntimeConfig(max_batch_size=3)).blocks.num_blocks == 3 * 16


def test_explicit_budget_and_inspect_agree(loaded, tiny_llama_engine):
    core = EngineCore(loaded, RuntimeConfig(kv_cache_memory="1MiB"))
    assert core.blocks.num_blocks == 2**20 // PER_BLOCK == 128
    assert summarize(tiny_llama_engine, kv_cache_memory=2**20)["kv_blocks"] == 128
    total = summarize(tiny_llama_engine)["weight_bytes"] + 2**20
    info = summarize(tiny_llama_engine, memory=total)
    assert info["kv_blocks"] == 128 and info["run_flag"] == f"--kv-cache-memory {2**20}"


def test_a_16_bit_cache_and_inspect_agree(tiny_llama_engine):
    """--kv-cache-dtype float16 halves a block: twice the blocks for a budget, in run and in inspect alike."""
    cfg = RuntimeConfig(kv_cache_memory="1MiB", kv_cache_dtype="float16")
    core = EngineCore(load_engine(tiny_llama_engine, "cpu", cfg.options), cfg)
    assert core.blocks.num_blocks == 256 and core.kv_block_bytes == PER_BLOCK // 2
    info = summarize(tiny_llama_engine, kv_cache_memory=2**20, kv_cache_dtype="float16")
    assert info["kv_blocks"] == 256 and info["kv_bytes_per_token"] == 256
    assert info["run_flag"] == f"--kv-cache-memory {2**20} --kv-cache-dtype float16"
    out = CliRunner().invoke(main, ["inspect", str(tiny_llama_engine), "--kv-cache-dtype", "int8"])
    assert out.exit_code == 2 and "'int8' is not one of 'auto', 'float16', 'bfloat16'" in out.output


def test_a_budget_beyond_available_memory_is_refused(loaded):
    with pytest.raises(UserError, match=r"kv_cache_memory \(102400.00 GiB\) is more than the .* GiB of memory"):
        EngineCore(loaded, RuntimeConfig(kv_cache_memory="100TiB"))


def test_offline_cache_fits_the_requests_and_only_grows(tiny_llama_engine):
    llm = LLM(tiny_llama_engine)
    assert llm.core.blocks.num_blocks == 1  # nothing asked yet
    llm.generate([SHORT, LONG], P)
    assert llm.core.blocks.num_blocks == 2 + 3  # 10 + 8 tokens -> 2 blocks of 16; 40 + 8 -> 3
    llm.generate([SHORT], P)
    assert llm.core.blocks.num_blocks == 5  # never shrinks
    llm.generate([LONG], P.model_copy(update={"n": 3, "max_tokens": 30}))
    assert llm.core.blocks.num_blocks == 3 * 5  # 3 sequences of 40 + 30 tokens, 5 blocks each
    fixed = LLM(tiny_llama_engine, kv_cache_memory=2**20)
    assert fixed.core.blocks.num_blocks == 128
    fixed.generate([SHORT, LONG, LONG], P)
    assert fixed.core.blocks.num_blocks == 128  # an explicit budget is never resized


def test_growing_starts_an_empty_prefix_cache(tiny_llama_engine):
    """A grown cache has fresh storage, so no old prefix may hit in it; the new one works as before."""
    llm = LLM(tiny_llama_engine)
    first = llm.generate([LONG], P)[0].token_ids
    assert llm.core.stats().prefix_cache.hits == 0
    grown = llm.generate([LONG, SHORT, SHORT], P)  # 3 + 2 + 2 blocks > 3: grown, LONG computed anew
    assert llm.core.blocks.num_blocks == 7 and llm.core.stats().prefix_cache.hits == 0
    again = llm.generate([LONG], P)  # no growth: LONG's 2 full prompt blocks hit
    assert llm.core.stats().prefix_cache.hits == 32
    reference = LLM(tiny_llama_engine, kv_cache_memory=2**20, enable_prefix_caching=False)
    expected = [o.token_ids for o in reference.generate([LONG, SHORT], P)]
    assert first == grown[0].token_ids == again[0].token_ids == expected[0]
    assert grown[1].token_ids == grown[2].token_ids == expected[1]


def test_a_refused_request_leaves_nothing_queued(tiny_llama_engine):
    llm = LLM(tiny_llama_engine)
    with pytest.raises(UserError, match="exceeds the engine's max_seq_len"):
        llm.generate([SHORT, [5] * 250], SamplingParams(max_tokens=10))
    assert not llm.core.has_unfinished()
    assert len(llm.generate([SHORT], P)[0].token_ids) == 8


def test_cpu_kv_cache_takes_memory_only_where_written(loaded):
    proc = psutil.Process()
    before = proc.memory_info().rss
    kv = loaded.model.new_kv_cache(256 * 2**20 // PER_BLOCK, 16)  # 256 MiB
    assert proc.memory_info().rss - before < 16 * 2**20
    kv.data[:, :, : kv.data.shape[2] // 4].fill_(1.0)  # a quarter of every layer's K and V
    assert proc.memory_info().rss - before > 48 * 2**20


def test_generate_cli_takes_a_kv_budget(tiny_llama_engine):
    args = ["generate", str(tiny_llama_engine), "Hello", "--no-chat", "--max-tokens", "4"]
    bad = CliRunner().invoke(main, [*args, "--kv-cache-memory", "lots"])
    assert bad.exit_code == 2 and "--kv-cache-memory 'lots' is not a size" in bad.output
    ok = CliRunner().invoke(main, [*args, "--kv-cache-memory", "1MiB"])
    assert ok.exit_code == 0 and "finish_reason=" in ok.output, ok.output
