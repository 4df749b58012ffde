"""The prefix cache's second tier (the `kv_offload` option) on the tiny engine: spills and restores
give the outputs of a run without it, restored blocks are bit-identical to a recompute, a restart
reuses the tier, and foreign, damaged and invalidated blocks are refused.

The tiny engine's blocks hold 16 tokens (8 KiB); its first tier here is 8 blocks, so a second
64-token prompt evicts the first one's blocks.
"""

from __future__ import annotations

import json

import pytest
import torch

from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.manifest import engine_fingerprint
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine
from trtserve.runtime.prefix_scope import block_key, chain_root

P = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
A, B, C = (list(range(s, s + 64)) for s in (3, 100, 200))
USABLE = 48  # (64 - 1) // 16 full blocks can be hits: the last token's logits are needed


@pytest.fixture(scope="module")
def loaded(tiny_llama_engine):
    return load_engine(tiny_llama_engine, device="cpu")


def core(loaded, path=None, num_blocks=8, mib=1) -> EngineCore:
    tier = KVOffloadConfig(bytes=mib << 20, path=path) if path != "none" else None
    return EngineCore(loaded, RuntimeConfig(kv_offload=tier), num_blocks=num_blocks)


def run(c: EngineCore, prompt: list[int], namespace: str | None = None) -> tuple[list[int], int]:
    """One greedy request to the end: (output tokens, prompt tokens served from a cache)."""
    c.add_request(GenerateRequest(prompt, P, RequestOptions(cache_namespace=namespace)))
    tokens, cached = [], -1
    while c.has_unfinished():
        for d in c.step():
            tokens += d.token_ids
            cached = d.num_cached_tokens
    c.blocks.check_invariants()
    return tokens, cached


def test_spill_and_restore_give_the_outputs_of_a_run_without_offload(loaded, tmp_path):
    plain, tiered = core(loaded, "none"), core(loaded, tmp_path)
    order = [A, B, C, A, B]
    ref = [run(plain, p) for p in order]
    got = [run(tiered, p) for p in order]
    assert [t for t, _ in got] == [t for t, _ in ref]
    assert [c for _, c in ref] == [0, 0, 0, 0, 0]  # 8 blocks: each prompt evicted the ones before
    assert [c for _, c in got] == [0, 0, 0, USABLE, USABLE]  # the second tier had them
    s = tiered.stats()
    assert s.kv_tier.restores == 2 * USABLE // 16 and s.kv_tier.hit_tokens == 2 * USABLE
    assert s.prefix_cache.hits == 2 * USABLE and s.kv_tier.spills > 0 and s.kv_tier.refusals == 0
    assert s.kv_tier.bytes == len(tiered.tier.tier.store.entries) * s.kv_cache.block_bytes > 0
    tiered.close()


def test_restored_blocks_are_bit_identical_to_a_recompute(loaded, tmp_path):
    fresh, tiered = core(loaded, "none"), core(loaded, tmp_path)
    run(fresh, A)
    for p in (A, B, C, A):  # the last A is restored from the second tier
        run(tiered, p)
    assert tiered.stats().kv_tier.restores == 3
    computed = fresh.runner.kv.read_blocks(fresh.blocks.lookup_prefix(A, None))
    restored = tiered.runner.kv.read_blocks(tiered.blocks.lookup_prefix(A, None))
    assert computed.shape[0] == 3 and torch.equal(computed, restored)
    tiered.close()


def test_a_restart_reuses_the_tier_and_refuses_invalidated_blocks(loaded, tmp_path):
    first = core(loaded, tmp_path)
    out, _ = run(first, A)
    run(first, B, namespace="docs")
    first.close()  # saves the first tier's prefixes and writes the index
    second = core(loaded, tmp_path)
    assert run(second, A) == (out, USABLE)  # warm from the first request on
    second.invalidate_cache("docs")  # B's blocks are stale from now on, in this process and the next
    second.close()
    third = core(loaded, tmp_path)
    assert run(third, A)[1] == USABLE and run(third, B, namespace="docs")[1] == 0
    third.close()


def test_a_damaged_block_is_recomputed_not_restored(loaded, tmp_path):
    first = core(loaded, tmp_path)
    out, _ = run(first, A)
    size = first.kv_block_bytes
    first.close()
    k1 = block_key(chain_root(engine_fingerprint(loaded.manifest), None), A[:16])
    k2 = block_key(k1, A[16:32])
    slots = {bytes.fromhex(k): slot for k, slot, *_ in json.loads((tmp_path / "index.json").read_text())["entries"]}
    with open(tmp_path / "blocks.bin", "r+b") as f:  # flip bytes in the middle of A's second block
        f.seek(slots[k2] * size + size // 2)
        data = f.read(4)
        f.seek(slots[k2] * size + size // 2)
        f.write(bytes(b ^ 0xFF for b in data))
    second = core(loaded, tmp_path)
    assert run(second, A) == (out, 16)  # the first block restored; the chain stops at the damaged one
    assert second.stats().kv_tier.refusals == 1
    second.close()


def test_a_damaged_or_foreign_index_is_not_reused(loaded, tmp_path, tiny_llama, tmp_path_factory):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    first = core(loaded, tmp_path)
    run(first, A)
    first.close()
    other_dir = tmp_path_factory.mktemp("other") / "engine"
    build_engine(BuildConfig(model=str(tiny_llama), tokens_per_block=16, max_batch_size=4), other_dir, quiet=True)
    other = load_engine(other_dir, device="cpu")  # the same weights, another engine (fingerprint)
    foreign = core(other, tmp_path)
    assert run(foreign, A)[1] == 0 and foreign.stats().kv_tier.restores == 0
    foreign.close()  # it wrote its own index over the other's
    (tmp_path / "index.json").write_text('{"format": "trtserve-kv-tier/1", "entries": [[')
    damaged = core(other, tmp_path)
    assert run(damaged, A)[1] == 0 and damaged.stats().kv_tier.restores == 0
    damaged.close()


def test_a_budget_below_one_block_and_a_shared_directory_are_refused(loaded, tmp_path):
    with pytest.raises(UserError, match=r"kv_offload.bytes \(1000 bytes\) holds no KV block .* give at least 8192"):
        EngineCore(loaded, RuntimeConfig(kv_offload=KVOffloadConfig(bytes=1000)), num_blocks=8)
    holder = core(loaded, tmp_path)
    with pytest.raises(UserError, match="in use by another engine; give each engine its own path"):
        core(loaded, tmp_path)
    holder.close()
    core(loaded, tmp_path).close()  # released on close


def test_sleep_releases_the_cache_and_wake_up_serves_again(loaded, tmp_path):
    c = core(loaded, tmp_path)
    out, _ = run(c, A)
    c.sleep()
    assert c.asleep and not hasattr(c, "runner")
    c.wake_up()
    assert run(c, A) == (out, USABLE)  # the prefixes it held went to the second tier and came back
    c.close()
