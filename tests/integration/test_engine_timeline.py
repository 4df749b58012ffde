"""A traced request's engine timeline (engine/timeline.py) from the torch engine: one record per prefill
chunk with its tokens and cached prefix, one per speculative verification, its grammar's compile with the
cache hit; an untraced request's deltas carry none."""

from __future__ import annotations

import pytest

from trtserve import LLM
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.runtime.features.timeline import StepTimeline

pytestmark = pytest.mark.timeout(300)

TRACED = RequestOptions(trace=True)
PROMPT = [5, 6, 7, 8, 9, 10] * 7  # 42 tokens that repeat, so prompt lookup proposes


def _run(llm: LLM, prompt: list[int], params: SamplingParams, options: RequestOptions = TRACED) -> list:
    core = llm.core
    core.add_request(GenerateRequest(prompt, params, options))
    deltas = []
    while core.has_unfinished():
        deltas += core.step()
    return deltas


@pytest.fixture(scope="module")
def llm(tiny_llama_engine):
    spec = {"method": "ngram", "num_speculative_tokens": 4, "max_batch_size": 8}
    return LLM(tiny_llama_engine, kv_cache_memory=16 << 20, max_num_tokens=16, speculative=spec)


def test_chunks_and_verifications_are_timed_on_the_last_delta(llm):
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    deltas = _run(llm, PROMPT, params)
    assert all(d.timeline is None for d in deltas[:-1])
    t = deltas[-1].timeline
    assert [(c.start, c.tokens, c.cached_tokens) for c in t.prefill_chunks] == [(0, 16, 0), (16, 16, 0), (32, 10, 0)]
    for a, b in zip(t.prefill_chunks, t.prefill_chunks[1:], strict=False):
        assert a.began <= a.ended <= b.began <= b.ended
    v = t.verifications
    spec = deltas[-1].spec
    assert v and len(v) == spec.drafts and sum(x.accepted for x in v) == spec.accepted_tokens
    assert sum(x.proposed for x in v) == spec.draft_tokens
    assert t.prefill_chunks[-1].ended <= v[0].began and all(x.began <= x.ended for x in v)
    assert t.grammar is None
    # the same prompt again: its first chunk starts after the cached prefix (whole blocks of it)
    again = _run(llm, PROMPT, params)[-1].timeline.prefill_chunks
    assert again[0].start == again[0].cached_tokens > 0 and sum(c.tokens for c in again) == 42 - again[0].start


def test_a_grammar_compile_is_timed_with_its_cache_hit(llm):
    guide = GuidedDecoding(kind="regex", spec="(ab|ba)+c")
    params = SamplingParams(max_tokens=8, temperature=0.0, guided=guide)
    prompt = llm.encode("abababab")
    first = _run(llm, prompt, params)[-1].timeline.grammar
    second = _run(llm, prompt, params)[-1].timeline.grammar
    assert (first.kind, first.cache_hit, second.cache_hit) == ("regex", False, True)
    assert first.began <= first.ended and second.began <= second.ended


def test_untraced_requests_carry_no_timeline(llm):
    deltas = _run(llm, PROMPT, SamplingParams(max_tokens=8, temperature=0.0), RequestOptions())
    assert all(d.timeline is None for d in deltas)
    (timeline,) = [f for f in llm.core.features.all if isinstance(f, StepTimeline)]
    assert timeline.traced == 0  # no traced request is left in the engine: its steps read no clock


def test_each_sequence_of_n_reports_the_requests_queue_time(llm):
    """Sequences forked after the prompt (n > 1) waited in the queue as the request did: each first delta's
    queue_time is the request's (a fork once counted from the clock's zero: hours)."""
    params = SamplingParams(n=3, max_tokens=4, temperature=1.0, seed=1)
    deltas = _run(llm, PROMPT, params, RequestOptions())
    first = {}
    for d in deltas:
        first.setdefault(d.index, d.queue_time)
    assert sorted(first) == [0, 1, 2]
    assert first[0] is not None and all(q == first[0] for q in first.values())
