"""The engine core on a tiny model: batch-invariant greedy output, seeds, n > 1, logprobs, aborts."""

from __future__ import annotations

import random

import pytest
import torch
from helpers import random_prompts

from trtserve import LLM, SamplingParams
from trtserve.engine.messages import GenerateRequest

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def alone(tiny_llama_engine):
    """Reference: each of 32 prompts generated on its own."""
    llm = LLM(tiny_llama_engine, kv_cache_memory=64 << 20, enable_prefix_caching=False)
    prompts = random_prompts(32, seed=7, lo=2, hi=120)
    return prompts, [llm.generate([p], GREEDY)[0].token_ids for p in prompts]


def _top5_consistent(llm: LLM, prompt, ours, ref) -> bool:
    """Equal up to the first divergence, where both tokens are in the reference's top-5."""
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        if a != b:
            p = SamplingParams(max_tokens=1, temperature=0.0, logprobs=5, ignore_eos=True)
            top = llm.generate([prompt + ref[:i]], p)[0].outputs[0].logprobs[0].top
            return {a, b} <= {t for t, _ in top}
    return True


@pytest.mark.parametrize(
    "settings",
    [
        dict(max_num_tokens=16),
        dict(max_num_tokens=64),
        dict(max_num_tokens=512),
        dict(max_num_tokens=64, enable_prefix_caching=True),
        dict(max_num_tokens=128, capacity_policy="max_utilization", kv_cache_memory=60 * 16 * 512),
    ],
    ids=["chunk16", "chunk64", "chunk512", "prefix-reuse", "preemption"],
)
def test_greedy_is_the_same_among_31_others(tiny_llama_engine, alone, settings):
    prompts, expected = alone
    settings = {"enable_prefix_caching": False, "kv_cache_memory": 64 << 20} | settings
    llm = LLM(tiny_llama_engine, **settings)
    # Shared prefixes make the prefix cache hit: every prompt is run twice, the second time cached.
    batch = prompts + prompts[:8]
    outs = llm.generate(batch, GREEDY)
    got = [o.token_ids for o in outs]
    exact = sum(g == e for g, e in zip(got, expected + expected[:8], strict=True))
    for p, g, e in zip(batch, got, expected + expected[:8], strict=True):
        assert _top5_consistent(llm, p, g, e)
    assert exact >= len(batch) - 2, f"only {exact}/{len(batch)} exactly equal"
    stats = llm.core.stats()
    if settings.get("enable_prefix_caching"):
        assert stats.prefix_cache.hits > 0 and any(o.num_cached_tokens > 0 for o in outs[32:])
    if settings.get("capacity_policy") == "max_utilization":
        assert stats.scheduler.preemptions > 0
    assert stats.kv_cache.blocks_used == 0 and stats.scheduler.running == stats.scheduler.waiting == 0


def test_seeded_sampling_is_reproducible_across_batches(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=32 << 20)
    prompt = random_prompts(1, seed=3)[0]
    p = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, top_k=50, seed=1234, ignore_eos=True)
    alone = llm.generate([prompt], p)[0].token_ids
    others = random_prompts(9, seed=4)
    mixed = llm.generate(
        others[:4] + [prompt] + others[4:],
        [SamplingParams(max_tokens=16, temperature=1.0, ignore_eos=True)] * 4
        + [p]
        + [SamplingParams(max_tokens=9, temperature=0.7, ignore_eos=True)] * 5,
    )
    assert mixed[4].token_ids == alone
    other_seed = llm.generate([prompt], p.model_copy(update={"seed": 99}))[0].token_ids
    assert other_seed != alone


def test_n_sequences_share_the_prompt_blocks(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=32 << 20, enable_prefix_caching=False)
    prompt = list(range(3, 3 + 40))  # 2 full blocks of 16 + 8 tokens
    core = llm.core
    req = GenerateRequest(prompt, SamplingParams(n=3, max_tokens=8, temperature=1.0, seed=5, ignore_eos=True))
    core.add_request(req)
    deltas = core.step()  # prefill, then fork
    assert sorted(d.index for d in deltas) == [0, 1, 2]
    tables = [core.blocks.block_table(r.seq) for r in core.groups[req.request_id]]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2]  # full prompt blocks shared
    assert len({t[2] for t in tables}) == 3  # the partial block is copied per sequence
    assert core.blocks.ref_count(tables[0][0]) == 3
    while core.has_unfinished():
        core.step()
    assert core.stats().kv_cache.blocks_used == 0
    out = llm.generate([prompt], SamplingParams(n=3, max_tokens=8, temperature=1.0, seed=5, ignore_eos=True))[0]
    assert len(out.outputs) == 3 and len({tuple(o.token_ids) for o in out.outputs}) > 1
    greedy = llm.generate([prompt], SamplingParams(n=2, max_tokens=8, temperature=0.0, ignore_eos=True))[0]
    assert greedy.outputs[0].token_ids == greedy.outputs[1].token_ids


def test_logprobs_and_prompt_logprobs_equal_hf(tiny_llama, tiny_llama_engine):
    from transformers import AutoModelForCausalLM

    llm = LLM(tiny_llama_engine, kv_cache_memory=32 << 20, max_num_tokens=16)  # prompt in 3 chunks
    prompt = random_prompts(1, seed=9, lo=40, hi=41)[0]
    out = llm.generate(
        [prompt], SamplingParams(max_tokens=4, temperature=0.0, logprobs=3, prompt_logprobs=2, ignore_eos=True)
    )[0]
    ref = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    ids = torch.tensor([prompt + out.token_ids])
    with torch.inference_mode():
        logp = torch.log_softmax(ref(ids).logits[0].float(), dim=-1)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
    for pos in range(1, len(prompt)):
        lp = out.prompt_logprobs[pos]
        assert lp.token_id == prompt[pos]
        assert lp.logprob == pytest.approx(float(logp[pos - 1, prompt[pos]]), abs=1e-4)
        assert [t for t, _ in lp.top] == logp[pos - 1].topk(2).indices.tolist()
    for k, (tok, lp) in enumerate(zip(out.token_ids, out.outputs[0].logprobs, strict=True)):
        row = logp[len(prompt) - 1 + k]
        assert lp.token_id == tok and lp.rank == 1
        assert lp.logprob == pytest.approx(float(row[tok]), abs=1e-4)
        assert [t for t, _ in lp.top] == row.topk(3).indices.tolist()


def test_min_tokens_stop_tokens_and_eos(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=32 << 20)
    prompt = random_prompts(1, seed=12)[0]
    free = llm.generate([prompt], SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True))[0].token_ids
    stop_tok = free[5]
    out = llm.generate(
        [prompt], SamplingParams(max_tokens=20, temperature=0.0, stop_token_ids=[stop_tok], ignore_eos=True)
    )[0]
    first = free.index(stop_tok)
    assert out.token_ids == free[: first + 1] and out.finish_reason == "stop" and out.outputs[0].stop_reason == stop_tok
    held = llm.generate(
        [prompt],
        SamplingParams(
            max_tokens=20, min_tokens=first + 2, temperature=0.0, stop_token_ids=[stop_tok], ignore_eos=True
        ),
    )[0]
    assert stop_tok not in held.token_ids[: first + 2]
    eos = llm.engine.eos_token_ids
    assert eos == {1}
    stopped = llm.generate([prompt], SamplingParams(max_tokens=20, temperature=0.0))[0]
    if 1 in free:
        assert stopped.token_ids == free[: free.index(1) + 1] and stopped.finish_reason == "stop"
    else:
        assert stopped.finish_reason == "length"


def test_stop_strings_cut_the_text(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=32 << 20)
    prompt = random_prompts(1, seed=13)[0]
    full = llm.generate([prompt], SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))[0]
    text = full.text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert len(stop) == 3
    out = llm.generate([prompt], SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True, stop=[stop]))[0]
    assert out.text == text[: text.index(stop)] and out.finish_reason == "stop" and out.outputs[0].stop_reason == stop
    kept = llm.generate(
        [prompt],
        SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True, stop=[stop], include_stop_str_in_output=True),
    )[0]
    assert kept.text == text[: text.index(stop) + 3]
    assert llm.core.stats().kv_cache.blocks_used == 0


def test_random_aborts_leave_every_block_free_or_cached(tiny_llama_engine):
    rng = random.Random(0)
    llm = LLM(tiny_llama_engine, kv_cache_memory=16 << 20, capacity_policy="max_utilization", max_num_tokens=64)
    core = llm.core
    prompts = random_prompts(40, seed=21, lo=2, hi=90)
    live = []
    for p in prompts:
        req = GenerateRequest(
            p,
            SamplingParams(max_tokens=rng.randint(1, 30), n=rng.choice([1, 1, 2]), temperature=0.8, ignore_eos=True),
        )
        core.add_request(req)
        live.append(req.request_id)
        if rng.random() < 0.5:
            core.step()
        if rng.random() < 0.3:
            core.abort(live.pop(rng.randrange(len(live))))
        core.blocks.check_invariants()
    while core.has_unfinished():
        core.step()
        if live and rng.random() < 0.2:
            core.abort(live.pop(rng.randrange(len(live))))
        core.blocks.check_invariants()
    s = core.stats()
    assert s.kv_cache.blocks_used == 0 and s.kv_cache.blocks_free + s.kv_cache.blocks_cached == s.kv_cache.blocks_total
    assert s.scheduler.running == s.scheduler.waiting == 0 and not core.groups


def test_engine_rejects_what_can_never_run(tiny_llama_engine):
    from trtserve.engine.errors import UserError

    llm = LLM(tiny_llama_engine, kv_cache_memory=1 << 20)
    with pytest.raises(
        UserError, match=r"prompt \(250 tokens\) plus max_tokens \(10\) exceeds the engine's max_seq_len \(256\)"
    ):
        llm.generate([[5] * 250], SamplingParams(max_tokens=10))
    with pytest.raises(UserError, match="prompt is empty"):
        llm.generate([[]], SamplingParams(max_tokens=10))
    with pytest.raises(UserError, match=r"prompt token ids must lie in \[0, 320\)"):
        llm.generate([[5, 999]], SamplingParams(max_tokens=10))


def test_a_new_kv_cache_holds_zeros_not_garbage(tiny_llama_engine):
    """Attention reads whole blocks; a masked slot must still be finite (0 * NaN = NaN)."""
    llm = LLM(tiny_llama_engine, kv_cache_memory=1 << 20)
    kv = llm.engine.model.new_kv_cache(8, 16)
    assert torch.count_nonzero(kv.data) == 0
