"""The thinking budget and grammars after the thinking, inside the torch engine (tiny random model whose
reply begins inside `<think>`, as a template that opens it leaves it): exactly `budget` free tokens,
then the close tag's tokens, then the answer; a grammar shapes only the answer. The same tokens with
speculative decoding, under preemption and from the prefix cache."""

from __future__ import annotations

import json

import jsonschema
import pytest
from helpers import random_prompts

from trtserve import LLM
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.engine.thinking import ThinkingSpan

pytestmark = pytest.mark.timeout(300)

SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima"]}}, "required": ["city"]}
GUIDE = GuidedDecoding(kind="json_schema", spec=json.dumps(SCHEMA))
SETTINGS = {
    "plain": dict(kv_cache_memory=16 << 20),
    "speculative": dict(
        kv_cache_memory=16 << 20, speculative={"method": "ngram", "num_speculative_tokens": 4, "max_batch_size": 8}
    ),
    "preemption": dict(kv_cache_memory=28 * 16 * 512, capacity_policy="max_utilization", max_num_tokens=64),
}


@pytest.fixture(scope="module")
def span(tiny_llama_engine) -> ThinkingSpan:
    tok = LLM(tiny_llama_engine, kv_cache_memory=1 << 20).tokenizer
    return ThinkingSpan(
        open_ids=tuple(tok.encode("<think>")), close_ids=tuple(tok.encode("</think>")), starts_inside=True
    )


@pytest.fixture(scope="module", params=list(SETTINGS))
def llm(request, tiny_llama_engine):
    llm = LLM(tiny_llama_engine, **SETTINGS[request.param])
    llm.setting = request.param
    return llm


def _run(llm: LLM, prompts, params, spans) -> list[list[int]]:
    """Each prompt's output tokens, all in one batch."""
    core, reqs = llm.core, []
    for prompt, p, s in zip(prompts, params, spans, strict=True):
        reqs.append(GenerateRequest(list(prompt), p, RequestOptions(thinking_span=s)))
        core.add_request(reqs[-1])
    out: dict = {r.request_id: [] for r in reqs}
    while core.has_unfinished():
        for d in core.step():
            assert d.error is None, d.error
            out[d.request_id] += d.token_ids
    return [out[r.request_id] for r in reqs]


def test_the_budget_closes_the_thinking_after_exactly_n_tokens(llm, span):
    prompts = random_prompts(6, seed=11, lo=20, hi=60)
    budgets = [0, 1, 5, 9, 17, 30]
    params = [
        SamplingParams(max_tokens=40, temperature=0.0 if i % 2 else 1.0, seed=i, ignore_eos=True)
        for i in range(len(prompts))
    ]
    free = _run(llm, prompts, params, [None] * len(prompts))
    spans = [span.__class__(**{**_fields(span), "budget": b}) for b in budgets]
    for _ in range(2):  # the second time from the prefix cache
        got = _run(llm, prompts, params, spans)
        for out, ref, b, s in zip(got, free, budgets, spans, strict=True):
            k = len(span.close_ids)
            assert out[:b] == ref[:b]  # thinking is free: the same tokens as without a budget
            assert tuple(out[b : b + k]) == span.close_ids, (llm.setting, b)
            assert s.phase(out).reasoning_tokens == b and s.phase(out).answer_from == b + k
            assert len(out) == 40
    if llm.setting == "preemption":
        assert llm.core.stats().scheduler.preemptions > 0
    if llm.setting == "speculative":
        assert llm.core.stats().spec.drafts > 0
    assert llm.core.blocks.stats().used == 0


def test_a_grammar_starts_after_the_thinking(llm, span):
    prompts = random_prompts(4, seed=12, lo=20, hi=60)
    params = [SamplingParams(max_tokens=60, temperature=1.0, seed=i, guided=GUIDE) for i in range(4)]
    unconstrained = [p.model_copy(update={"guided": None, "ignore_eos": True}) for p in params]
    spans = [span.__class__(**{**_fields(span), "budget": 6 + 3 * i}) for i in range(4)]
    free = _run(llm, prompts, unconstrained, spans)
    got = _run(llm, prompts, params, spans)
    tok = llm.tokenizer
    for out, ref, s in zip(got, free, spans, strict=True):
        phase = s.phase(out)
        assert out[: s.budget] == ref[: s.budget]  # thinking tokens are unconstrained
        assert phase.reasoning_tokens == s.budget and phase.answer_from is not None
        jsonschema.validate(json.loads(tok.decode(out[phase.answer_from :], skip_special_tokens=True)), SCHEMA)


def test_n_sequences_each_think_then_answer(span, tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=16 << 20)
    s = span.__class__(**{**_fields(span), "budget": 4})
    req = GenerateRequest(random_prompts(1, seed=3)[0], SamplingParams(n=3, max_tokens=50, seed=5, guided=GUIDE))
    req.options = RequestOptions(thinking_span=s)
    llm.core.add_request(req)
    outs: dict[int, list[int]] = {}
    while llm.core.has_unfinished():
        for d in llm.core.step():
            outs.setdefault(d.index, []).extend(d.token_ids)
    assert len(outs) == 3
    for out in outs.values():
        phase = s.phase(out)
        assert phase.reasoning_tokens == 4
        jsonschema.validate(
            json.loads(llm.tokenizer.decode(out[phase.answer_from :], skip_special_tokens=True)), SCHEMA
        )


def _fields(span: ThinkingSpan) -> dict:
    return {"open_ids": span.open_ids, "close_ids": span.close_ids, "starts_inside": span.starts_inside}
