"""Speculative decoding (runtime/speculative/) is lossless: greedy output equals the plain engine's token
for token, sampled output keeps the model's distribution, and the KV cache's blocks are accounted exactly."""

from __future__ import annotations

import pytest
import torch
from helpers import VOCAB, make_hf_model, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import GuidedDecoding
from trtserve.engine.speculative import SpeculativeConfig

pytestmark = pytest.mark.timeout(300)

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "max_batch_size": 8}  # batches of 4 speculate
KV = 16 << 20


def repetitive_prompts() -> list[list[int]]:
    """Prompts that repeat themselves, so prompt lookup finds matches (and greedy output loops back)."""
    return [[5, 6, 7, 8, 9, 10] * 6, [11, 12, 13] * 10, list(range(20, 50)) + list(range(20, 35)), [40, 41] * 12]


@pytest.fixture(scope="module")
def plain(tiny_llama_engine):
    return LLM(tiny_llama_engine, kv_cache_memory=KV)


@pytest.fixture(scope="module")
def spec(tiny_llama_engine):
    return LLM(tiny_llama_engine, kv_cache_memory=KV, speculative=NGRAM)


def _same_logprobs(a, b, exact: bool):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.token_id == y.token_id and x.rank == y.rank
        assert [t for t, _ in x.top] == [t for t, _ in y.top]
        if exact:
            assert x.logprob == y.logprob and x.top == y.top
        else:
            assert x.logprob == pytest.approx(y.logprob, abs=1e-4)


def test_greedy_batch_equals_plain_with_logprobs(plain, spec):
    prompts = repetitive_prompts() + random_prompts(3, seed=35)
    p = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True, logprobs=3)
    before = spec.core.stats().spec
    want, got = plain.generate(prompts, p), spec.generate(prompts, p)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    for w, g in zip(want, got, strict=True):
        _same_logprobs(w.outputs[0].logprobs, g.outputs[0].logprobs, exact=False)
    s = spec.core.stats().spec
    assert s.accepted_tokens - before.accepted_tokens > 0  # proposals were made and kept: a real test
    assert spec.core.blocks.stats().used == 0
    spec.core.blocks.check_invariants()


def test_prefix_cache_hits_and_stop_tokens(plain, spec):
    prompts = repetitive_prompts()
    free = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    first = plain.generate(prompts, free)
    # stop on a token each output emits partway, often one that was proposed and accepted
    stops = [o.token_ids[len(o.token_ids) // 2] for o in first]
    params = [free.model_copy(update={"stop_token_ids": [t]}) for t in stops]
    hits = spec.core.stats().prefix_cache.hits
    for _ in range(2):  # the second round runs from the prefixes the first one cached
        got = spec.generate(prompts, params)
        assert [o.token_ids for o in got] == [o.token_ids for o in plain.generate(prompts, params)]
        assert all(o.finish_reason == "stop" for o in got)
    assert spec.core.stats().prefix_cache.hits > hits
    assert spec.core.blocks.stats().used == 0
    spec.core.blocks.check_invariants()


def test_deterministic_mode_is_bitwise(tiny_llama_engine):
    prompts = repetitive_prompts()
    p = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True, logprobs=2)
    want = LLM(tiny_llama_engine, kv_cache_memory=KV, deterministic=True).generate(prompts, p)
    llm = LLM(tiny_llama_engine, kv_cache_memory=KV, deterministic=True, speculative=NGRAM)
    got = llm.generate(prompts, p)
    assert llm.core.stats().spec.accepted_tokens > 0
    for w, g in zip(want, got, strict=True):
        assert g.token_ids == w.token_ids
        _same_logprobs(w.outputs[0].logprobs, g.outputs[0].logprobs, exact=True)


def test_guided_output_equals_plain(plain, spec):
    guide = GuidedDecoding(kind="regex", spec="(ab|ba)+c")
    p = SamplingParams(max_tokens=24, temperature=0.0, guided=guide)
    prompts = ["abababababababab", "ba ba ba ba ba", "c c c c c c c"]
    want, got = plain.generate(prompts, p), spec.generate(prompts, p)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.text for o in got] == [o.text for o in want]
    assert spec.core.blocks.stats().used == 0


def test_opt_out_and_batch_limit_switch_off(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=KV, speculative=SpeculativeConfig(**NGRAM | {"max_batch_size": 2}))
    p = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    llm.generate(repetitive_prompts(), p)  # four running: above max_batch_size, no step speculates
    assert llm.core.stats().spec.drafts == 0
    core = llm.core
    core.add_request(GenerateRequest(repetitive_prompts()[0], p, RequestOptions(speculate=False)))
    while core.has_unfinished():
        assert all(d.spec is None for d in core.step())
    assert core.stats().spec.drafts == 0
    out = llm.generate(repetitive_prompts()[:1], p)
    assert llm.core.stats().spec.drafts > 0 and out[0].token_ids


def test_counters_are_consistent(spec):
    core = spec.core
    p = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    before = core.stats().spec
    core.add_request(GenerateRequest(repetitive_prompts()[1], p))
    deltas = []
    while core.has_unfinished():
        deltas += core.step()
    last = deltas[-1]
    c = last.spec
    assert last.finish_reason == "length" and c is not None and c.drafts > 0
    assert c.accepted_tokens <= c.draft_tokens and c.drafts <= c.draft_tokens
    assert sum(c.accepted_per_position) == c.accepted_tokens
    assert all(
        a >= b for a, b in zip(c.accepted_per_position, c.accepted_per_position[1:], strict=False)
    )  # a prefix is kept
    assert c.accepted_per_position[0] <= c.drafts
    total = core.stats().spec
    assert total.drafts - before.drafts == c.drafts
    assert total.accepted_tokens - before.accepted_tokens == c.accepted_tokens
    # every step emits one token of the target's own, after the proposals it accepted
    assert sum(len(d.token_ids) for d in deltas) == 30
    assert sum(len(d.token_ids) - 1 for d in deltas) == c.accepted_tokens


def test_cancels_mid_verification_free_every_block(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=KV, speculative=NGRAM)
    core = llm.core
    p = SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True)
    reqs = [GenerateRequest(x, p) for x in repetitive_prompts()]
    for r in reqs:
        core.add_request(r)
    drafts: list[int] = []  # proposals per step, seen by wrapping the scheduler's step
    schedule = core.scheduler.schedule
    core.scheduler.schedule = lambda: _note(schedule(), drafts)
    while sum(drafts) < 12:  # several verification steps in: requests are mid-speculation
        core.step()
    assert core.blocks.stats().used > 0
    for r in reqs[::2]:
        core.abort(r.request_id)
    core.blocks.check_invariants()
    while core.has_unfinished():
        core.step()
        core.blocks.check_invariants()
    for r in reqs[1::2]:
        core.abort(r.request_id)
    s = core.blocks.stats()
    assert s.used == 0 and s.free + s.cached == s.num_blocks
    core.blocks.check_invariants()


def _note(out, seen: list[int]):
    seen.append(sum(len(c.draft) for c in out.chunks))
    return out


def test_sampled_tokens_keep_the_model_distribution(plain, tiny_llama_engine):
    """Over many seeds, the second token (verified against proposals) follows the model's exact
    distribution given the first; top_k=4 makes that distribution four tokens wide."""
    prompt = [7, 8, 9] * 8
    first = plain.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))[0].token_ids[0]
    ref = plain.generate([prompt + [first]], SamplingParams(max_tokens=1, temperature=0.0, logprobs=4))[0]
    top = ref.outputs[0].logprobs[0].top  # the model's four likeliest next tokens and their logprobs
    exact = torch.softmax(torch.tensor([lp for _, lp in top]) / 0.7, 0)
    cfg = SpeculativeConfig(**NGRAM | {"max_batch_size": 256})
    llm = LLM(tiny_llama_engine, kv_cache_memory=64 << 20, speculative=cfg, max_batch_size=256)
    # proposals the model often rejects: its second likeliest token, then its likeliest
    llm.core.speculation.speculator.proposer = Always([top[1][0], top[0][0]])
    counts = dict.fromkeys([t for t, _ in top], 0)
    n = 0
    for base in range(0, 3000, 250):
        params = [SamplingParams(max_tokens=4, temperature=0.7, top_k=4, seed=s) for s in range(base, base + 250)]
        for o in llm.generate([prompt] * 250, params):
            if o.token_ids[0] == first:
                counts[o.token_ids[1]] += 1
                n += 1
    s = llm.core.stats().spec
    assert s.drafts > 0 and 0 < s.accepted_tokens < s.draft_tokens  # both acceptance and rejection happened
    empirical = torch.tensor([counts[t] / n for t, _ in top])
    assert n > 1000, n
    assert 0.5 * float((empirical - exact).abs().sum()) < 0.04  # total variation; ~0.015 expected at this n


class Always:
    """A proposer that proposes the same tokens whatever the sequence."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens

    def propose_batch(self, asks) -> list[list[int]]:
        return [self.tokens[:k] for _, k, _ in asks]

    def forget(self, seq) -> None:
        pass


def test_the_engine_as_its_own_draft_is_accepted_in_full(plain, tiny_llama_engine):
    prompts = random_prompts(3, seed=36)
    p = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    cfg = {"method": "draft_model", "num_speculative_tokens": 3, "draft_engine_dir": str(tiny_llama_engine)}
    llm = LLM(tiny_llama_engine, kv_cache_memory=KV, speculative=cfg)
    draft = llm.core.speculation.speculator.proposer
    batched, forward = [], draft.model.forward
    draft.model.forward = lambda batch, kv, lora=None: batched.append(batch.block_tables.shape[0]) or forward(batch, kv)
    got = llm.generate(prompts, p)
    assert [o.token_ids for o in got] == [o.token_ids for o in plain.generate(prompts, p)]
    assert max(batched) == 3  # the draft ran the three sequences' proposals as one batch
    s = llm.core.stats().spec
    assert s.drafts > 0 and s.accepted_tokens == s.draft_tokens
    assert draft.blocks.stats().used == 0  # every sequence's draft KV went when it finished
    draft.blocks.check_invariants()
    llm.core.sleep()  # the draft's KV cache goes with the target's
    assert draft.kv is None
    llm.core.wake_up()
    again = llm.generate(prompts, p)
    assert [o.token_ids for o in again] == [o.token_ids for o in got]
    assert llm.core.stats().spec.drafts > s.drafts and draft.blocks.stats().used == 0


def test_a_draft_with_another_vocabulary_is_refused(tmp_path, tiny_llama_engine):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    hf = make_hf_model(tmp_path / "hf", "llama", vocab_size=VOCAB + 16)
    build_engine(BuildConfig(model=str(hf), tokens_per_block=16), tmp_path / "draft", quiet=True)
    cfg = {"method": "draft_model", "draft_engine_dir": str(tmp_path / "draft")}
    with pytest.raises(UserError, match="does not use the target's tokenizer"):
        LLM(tiny_llama_engine, kv_cache_memory=KV, speculative=cfg)


def test_generate_flags_set_the_option(tiny_llama_engine):
    from click.testing import CliRunner

    from trtserve.cli import main

    args = ["generate", str(tiny_llama_engine), "a b a b a b a b", "--no-chat", "--max-tokens", "12"]
    plain = CliRunner().invoke(main, args)
    spec = CliRunner().invoke(main, [*args, "--speculative", "ngram", "--speculative-tokens", "2"])
    assert plain.exit_code == 0 and spec.exit_code == 0, spec.output
    assert spec.output == plain.output
    bad = CliRunner().invoke(main, [*args, "--speculative", "eagle"])
    assert bad.exit_code != 0 and "is not a method; give ngram or draft:DRAFT_ENGINE_DIR" in bad.output


def test_async_engine_streams_kept_tokens_and_frees_blocks_on_abort(plain, tiny_llama_engine):
    import asyncio

    from trtserve.backends.torch_engine import TorchEngine
    from trtserve.engine.run_config import RuntimeConfig

    engine = TorchEngine(tiny_llama_engine, RuntimeConfig(kv_cache_memory=KV, speculative=NGRAM))
    p = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    prompt = repetitive_prompts()[1]  # its greedy output repeats a token: proposals are kept

    async def stream():
        tokens, last = [], None
        async for d in engine.generate(GenerateRequest(prompt, p)):
            tokens += d.token_ids
            last = d
        return tokens, last

    async def leave():
        long = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
        gen = engine.generate(GenerateRequest(prompt, long))
        left = False
        async for d in gen:
            if len(d.token_ids) > 1 and not d.finish_reason:  # proposals were kept: leave mid-speculation
                left = True
                break
        await gen.aclose()
        for _ in range(100):
            await asyncio.sleep(0.02)
            if engine.stats().kv_cache.blocks_used == 0 and engine.stats().scheduler.running == 0:
                break
        return left

    try:
        tokens, last = asyncio.run(stream())
        assert tokens == plain.generate([prompt], p)[0].token_ids
        assert last.spec is not None and last.spec.accepted_tokens > 0
        assert engine.stats().spec.accepted_tokens >= last.spec.accepted_tokens
        assert asyncio.run(leave())
        s = engine.stats()
        assert s.kv_cache.blocks_used == 0 and s.scheduler.running == 0 and s.scheduler.waiting == 0
    finally:
        engine.shutdown()


def test_penalties_apply_per_position_and_seeds_repeat(plain, spec):
    prompts = repetitive_prompts()
    greedy = SamplingParams(
        max_tokens=24, temperature=0.0, ignore_eos=True, repetition_penalty=1.3, frequency_penalty=0.4, min_tokens=5
    )
    assert [o.token_ids for o in spec.generate(prompts, greedy)] == [
        o.token_ids for o in plain.generate(prompts, greedy)
    ]
    seeded = [SamplingParams(max_tokens=24, temperature=0.8, top_p=0.9, seed=s, ignore_eos=True) for s in range(4)]
    first = [o.token_ids for o in spec.generate(prompts, seeded)]
    assert [o.token_ids for o in spec.generate(prompts, seeded)] == first


def test_n_sequences_and_prompt_logprobs_equal_plain(plain, spec):
    """n sequences fork after the prompt and then speculate each on its own."""
    prompts = repetitive_prompts()[:2]
    p = SamplingParams(n=3, max_tokens=16, temperature=0.0, ignore_eos=True, prompt_logprobs=1)
    want, got = plain.generate(prompts, p), spec.generate(prompts, p)
    assert [[c.token_ids for c in o.outputs] for o in got] == [[c.token_ids for c in o.outputs] for o in want]
    assert [[lp and lp.token_id for lp in o.prompt_logprobs] for o in got] == [
        [lp and lp.token_id for lp in o.prompt_logprobs] for o in want
    ]


def test_chunked_prefill_ending_in_a_verification_row_equals_plain(plain, tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=KV, max_num_tokens=16, speculative=NGRAM)
    prompt = [5, 6, 7, 8] * 4 + [5]  # 17 tokens: a chunk of 16, then the last one with proposals
    p = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True, prompt_logprobs=1, logprobs=1)
    want, got = plain.generate([prompt], p)[0], llm.generate([prompt], p)[0]
    assert got.token_ids == want.token_ids
    assert [lp and lp.token_id for lp in got.prompt_logprobs] == [lp and lp.token_id for lp in want.prompt_logprobs]
    _same_logprobs(want.outputs[0].logprobs, got.outputs[0].logprobs, exact=False)
    assert llm.core.stats().spec.drafts > 0


class Script:
    """A proposer that proposes what the plain engine generated next (every proposal is kept)."""

    def __init__(self, prompt: list[int], output: list[int]):
        self.tokens = prompt + output

    def propose_batch(self, asks):
        return [self.tokens[len(t) : len(t) + k] if self.tokens[: len(t)] == list(t) else [] for t, k, _ in asks]

    def forget(self, seq):
        pass


def test_proposals_after_a_stop_token_are_not_counted_as_accepted(plain, tiny_llama_engine):
    prompt = repetitive_prompts()[0]
    ref = plain.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))[0].token_ids
    stop = next(i for i in range(2, 4) if ref[i] not in ref[:i])  # inside the first draft, not its last token
    llm = LLM(tiny_llama_engine, kv_cache_memory=KV, speculative=NGRAM)
    llm.core.speculation.speculator.proposer = Script(prompt, ref)
    p = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, stop_token_ids=[ref[stop]])
    out = llm.generate([prompt], p)[0]
    assert out.token_ids == ref[: stop + 1]  # the stop token is emitted, the proposals after it are not
    s = llm.core.stats().spec
    # prefill emits ref[0]; one verification of 4 proposals, all agreed with, emits ref[1..stop] and stops
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (1, 4, stop)
