"""KV-cache sizing rules (engine/kv_sizing.py), asserted by the exact block counts they produce."""

from __future__ import annotations

import pytest

from trtserve.engine.errors import UserError
from trtserve.engine.kv_sizing import blocks_for_requests, size_kv_cache
from trtserve.engine.layout import EngineBuildConfig, PluginConfig
from trtserve.engine.model_config import ModelConfig
from trtserve.engine.run_config import RuntimeConfig

GiB = 1 << 30
# SmolLM2-135M's shape: 30 layers x 3 KV heads x 64, float32 -> 46080 bytes a token, 1440 KiB a block.
MODEL = ModelConfig(
    architecture="LlamaForCausalLM",
    dtype="float32",
    vocab_size=49152,
    hidden_size=576,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_size=64,
    intermediate_size=1536,
    max_position_embeddings=8192,
    norm_epsilon=1e-5,
    rotary_base=1e5,
)
BUILD = EngineBuildConfig(
    max_batch_size=256,
    max_input_len=8191,
    max_seq_len=8192,
    max_num_tokens=8192,
    plugin_config=PluginConfig(tokens_per_block=32),
)
PER_BLOCK = 46080 * 32


def size(run=None, device="cpu", available=20 * GiB, max_batch_size=256):
    return size_kv_cache(
        MODEL, BUILD, run or RuntimeConfig(), device=device, available=available, max_batch_size=max_batch_size
    )


def test_cpu_default_is_4_gib_whatever_memory_is_free():
    s = size(available=20 * GiB)
    assert s.num_blocks == 4 * GiB // PER_BLOCK == 2912
    assert s.num_tokens == 2912 * 32 and s.full_length_sequences == 2912 // 256 == 11
    assert "kv_cache_cpu_memory (4 GiB)" in s.reason
    assert size(available=200 * GiB).num_blocks == 2912
    assert "--kv-cache-memory" in s.describe()


def test_cpu_default_is_configurable():
    assert size(RuntimeConfig(kv_cache_cpu_memory="1GiB")).num_blocks == GiB // PER_BLOCK == 728


def test_cpu_default_never_exceeds_what_max_batch_size_full_length_sequences_need():
    s = size(max_batch_size=2)
    assert s.num_blocks == 2 * 256 and "max_batch_size=2" in s.reason


def test_cpu_default_never_exceeds_its_share_of_available_memory():
    s = size(available=6 * GiB)  # half of 6 GiB < 4 GiB
    assert s.num_blocks == 3 * GiB // PER_BLOCK == 2184 and "0.5 of the 6.0 GiB" in s.reason
    assert size(RuntimeConfig(kv_cache_free_memory_fraction=0.25), available=6 * GiB).num_blocks == 1092


def test_cuda_takes_the_fraction_of_free_memory():
    s = size(device="cuda", available=40 * GiB)
    assert s.num_blocks == 20 * GiB // PER_BLOCK == 14563 and "free GPU memory" in s.reason
    assert size(device="cuda", available=40 * GiB, max_batch_size=4).num_blocks == 4 * 256


def test_an_explicit_budget_wins_on_every_device():
    run = RuntimeConfig(kv_cache_memory="100MiB")
    for device, available in (("cpu", 1 * GiB), ("cuda", 80 * GiB)):
        s = size(run, device=device, available=available)
        assert s.num_blocks == 100 * 2**20 // PER_BLOCK == 71 and s.reason == "the kv_cache_memory given"


def test_a_budget_below_one_block_is_refused():
    with pytest.raises(UserError, match="holds no block of 1474560 bytes; give a larger kv_cache_memory"):
        size(RuntimeConfig(kv_cache_memory=PER_BLOCK - 1))


def test_offline_sizes_to_prompts_plus_max_tokens_in_blocks_times_n():
    kw = dict(tokens_per_block=16, max_seq_len=256, max_batch_size=8, ceiling=1000)
    # 10 + 8 -> 2 blocks; 20 + 8 -> 2 blocks, twice (n=2); 33 + 0 -> 3 blocks
    assert blocks_for_requests([(18, 1), (28, 2), (33, 1)], **kw) == 2 + 2 * 2 + 3
    # past max_seq_len a sequence never needs more than max_seq_len (the request is refused anyway)
    assert blocks_for_requests([(10_000, 1)], **kw) == 16


def test_offline_counts_only_what_max_batch_size_lets_run_at_once():
    got = blocks_for_requests(
        [(16, 1)] * 10 + [(64, 1)] * 3, tokens_per_block=16, max_seq_len=256, max_batch_size=4, ceiling=1000
    )
    assert got == 3 * 4 + 1  # the 4 largest sequences: three of 4 blocks, one of 1


def test_offline_stays_under_the_device_default_but_fits_the_largest_request():
    kw = dict(tokens_per_block=16, max_seq_len=256, max_batch_size=256)
    assert blocks_for_requests([(256, 1)] * 100, ceiling=50, **kw) == 50
    assert blocks_for_requests([(256, 4)], ceiling=10, **kw) == 64  # one request of 4 x 16 blocks
