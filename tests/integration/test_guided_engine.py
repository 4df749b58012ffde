"""Guided decoding inside the torch engine (tiny random model, offline LLM): preemption and
recompute, prefix caching, n > 1 and unconstrained neighbours in the same batch."""

from __future__ import annotations

import json

import jsonschema
import pytest
from helpers import random_prompts

from trtserve import LLM
from trtserve.engine.sampling import GuidedDecoding, SamplingParams

pytestmark = pytest.mark.timeout(300)

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "kind": {"enum": ["a", "bb", "ccc"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
    },
    "required": ["id", "kind", "tags"],
    "additionalProperties": False,
}
GUIDE = GuidedDecoding(kind="json_schema", spec=json.dumps(SCHEMA))


def _params(i: int, guided: bool) -> SamplingParams:
    return SamplingParams(
        max_tokens=60, temperature=1.0, seed=100 + i, ignore_eos=not guided, guided=GUIDE if guided else None
    )


@pytest.fixture(scope="module")
def batch():
    prompts = random_prompts(8, seed=5, lo=20, hi=60)
    prompts += prompts[:3]  # repeated prompts: prefix-cache hits
    params = [_params(i, guided=i % 2 == 0) for i in range(len(prompts))]
    return prompts, params


@pytest.fixture(scope="module")
def reference(tiny_llama_engine, batch):
    """Each request alone, with ample KV cache."""
    prompts, params = batch
    llm = LLM(tiny_llama_engine, kv_cache_memory=16 << 20)
    return [llm.generate([p], [sp])[0].token_ids for p, sp in zip(prompts, params, strict=True)]


@pytest.mark.parametrize(
    "settings",
    [
        dict(kv_cache_memory=16 << 20, enable_prefix_caching=True),
        dict(kv_cache_memory=28 * 16 * 512, capacity_policy="max_utilization", max_num_tokens=64),
        dict(kv_cache_memory=16 << 20, enable_prefix_caching=True, deterministic=True),
    ],
    ids=["batched-prefix-cache", "preemption", "deterministic"],
)
def test_batched_equals_alone_and_every_constrained_output_validates(tiny_llama_engine, batch, reference, settings):
    prompts, params = batch
    llm = LLM(tiny_llama_engine, **settings)
    if settings.get("enable_prefix_caching"):
        llm.generate(prompts[:3], params[:3])  # their prompts are cached for the batch's repeats
    outs = llm.generate(prompts, params)
    stats = llm.core.stats()
    if settings.get("capacity_policy") == "max_utilization":
        assert stats.scheduler.preemptions > 0
    else:
        assert stats.prefix_cache.hits > 0
    if settings.get("deterministic"):  # its own reference: other kernels than the default path's
        reference = [llm.generate([p], [sp])[0].token_ids for p, sp in zip(prompts, params, strict=True)]
    for o, sp, ref in zip(outs, params, reference, strict=True):
        assert o.token_ids == ref  # seeded: the same tokens whatever the batch, preempted or not
        if sp.guided is not None:
            assert o.finish_reason == "stop"
            jsonschema.validate(json.loads(o.text), SCHEMA)
        else:
            assert len(o.token_ids) == 60  # unconstrained neighbours are untouched (ignore_eos)


def test_n_sequences_each_get_their_own_matcher(tiny_llama_engine):
    llm = LLM(tiny_llama_engine, kv_cache_memory=16 << 20)
    (out,) = llm.generate([random_prompts(1, seed=9)[0]], SamplingParams(n=4, max_tokens=60, seed=3, guided=GUIDE))
    texts = [c.text for c in out.outputs]
    assert len(set(texts)) > 1
    for t in texts:
        jsonschema.validate(json.loads(t), SCHEMA)


def test_a_request_waits_for_its_grammar_and_can_be_aborted_meanwhile(tiny_llama_engine):
    from trtserve.engine.messages import GenerateRequest

    llm = LLM(tiny_llama_engine, kv_cache_memory=16 << 20)
    core = llm.core
    props = {f"p{i}": {"enum": [f"v{i}_{k}" for k in range(6)]} for i in range(40)}
    guide = GuidedDecoding(kind="json_schema", spec=json.dumps({"type": "object", "properties": props}))
    free = GenerateRequest(random_prompts(1, seed=1)[0], SamplingParams(max_tokens=4, ignore_eos=True))
    kept = GenerateRequest(random_prompts(1, seed=2)[0], SamplingParams(max_tokens=200, seed=1, guided=guide))
    dropped = GenerateRequest(random_prompts(1, seed=3)[0], SamplingParams(max_tokens=8, guided=guide))
    for r in (free, kept, dropped):
        core.add_request(r)
    assert len(core.compiling) == 2 and len(core.scheduler.waiting) == 1  # the free one does not wait
    (abort,) = core.abort(dropped.request_id)
    assert abort.finish_reason == "abort"
    deltas = []
    while core.has_unfinished():
        deltas += core.step()
    assert {d.request_id for d in deltas} == {free.request_id, kept.request_id}
    text = llm.tokenizer.decode([t for d in deltas if d.request_id == kept.request_id for t in d.token_ids])
    assert set(json.loads(text.removesuffix("</s>"))) <= set(props)
    assert core.stats().kv_cache.blocks_used == 0 and len(core.compiling) == 0
