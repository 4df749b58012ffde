"""Grammar compilation, caching and masking (runtime/guided.py) on the tiny test tokenizer; no model."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import VOCAB, write_tokenizer

from trtserve.engine.errors import UserError
from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.runtime.guided import Grammars, apply_grammar_masks
from trtserve.runtime.sampler import SampleRow, sample

pytestmark = pytest.mark.timeout(120)

MODEL_VOCAB = VOCAB + 64  # the model's lm_head is wider than the tokenizer: the extra ids are never allowed


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    d = tmp_path_factory.mktemp("tok")
    write_tokenizer(d)
    return AutoTokenizer.from_pretrained(str(d))


@pytest.fixture(scope="module")
def grammars(tokenizer):
    return Grammars(tokenizer, MODEL_VOCAB, [tokenizer.eos_token_id], max_entries=3)


def choice(*words: str) -> GuidedDecoding:
    return GuidedDecoding(kind="choice", spec=json.dumps(list(words)))


def test_compiled_once_per_spec_and_the_cache_is_bounded(grammars):
    h, m = grammars.hits, grammars.misses
    a = grammars.compile(choice("yes", "no"))
    assert grammars.compile(choice("yes", "no")) is a
    assert (grammars.hits - h, grammars.misses - m) == (1, 1)
    for w in ("a", "b", "c"):
        grammars.compile(choice(w))
    assert len(grammars._cache) == 3 and choice("yes", "no") not in grammars._cache  # least recently used went
    assert grammars.compile(choice("yes", "no")) is not a  # compiled again


@pytest.mark.parametrize(
    "guide, words",
    [
        (
            GuidedDecoding(kind="json_schema", spec='{"type": "object", "properties": {"a": {"$ref": "#/nope"}}}'),
            "JSON schema",
        ),
        (GuidedDecoding(kind="json_schema", spec="{not json"), "JSON schema"),
        (GuidedDecoding(kind="regex", spec="[a-"), "regex"),
        (GuidedDecoding(kind="grammar", spec="root ::= missing"), "EBNF grammar"),
    ],
)
def test_a_spec_the_compiler_refuses_is_a_user_error(grammars, guide, words):
    with pytest.raises(UserError, match=f"the {words} cannot be compiled"):
        grammars.validate(guide)  # on the caller's thread: parsing only
    with pytest.raises(UserError, match=f"the {words} cannot be compiled"):
        grammars.submit(guide).result(timeout=60)


def test_submit_compiles_once_off_the_callers_thread(tokenizer):
    g = Grammars(tokenizer, MODEL_VOCAB, [tokenizer.eos_token_id])
    guide = GuidedDecoding(kind="regex", spec="[0-9]{1,40}")
    first, second = g.submit(guide), g.submit(guide)
    assert first.result(timeout=60) is second.result(timeout=60) and g.misses == 1
    assert g.submit(guide).done()  # cached: an already-done future


def _allowed(logits: torch.Tensor) -> set[int]:
    return set(torch.isfinite(logits).nonzero().flatten().tolist())


def test_masks_touch_only_constrained_rows_and_pad_the_model_vocab(grammars, tokenizer):
    state = grammars.new_state(choice("Paged", "quick"))
    logits = torch.randn(3, MODEL_VOCAB)
    before = logits.clone()
    apply_grammar_masks(logits, [None, state, None])
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    allowed = _allowed(logits[1])
    starts = {tokenizer.encode(w)[0] for w in ("Paged", "quick")}
    assert starts <= allowed and max(allowed) < len(tokenizer)  # nothing in the padded tail
    for t in allowed:
        assert any(w.startswith(tokenizer.decode([t])) for w in ("Paged", "quick"))


def test_sampled_tokens_follow_the_grammar_and_rollback_restores_it(grammars, tokenizer):
    guide = GuidedDecoding(kind="regex", spec="(ab|cd)+!")
    state = grammars.new_state(guide)
    params = SamplingParams(temperature=1.0, seed=0, guided=guide)
    gen = torch.Generator().manual_seed(0)
    out: list[int] = []
    while not state.is_terminated and len(out) < 40:
        tok, _ = sample(torch.randn(1, MODEL_VOCAB, generator=gen), [SampleRow(params, [5], out, gen, (), state)])
        assert state.accept(tok[0])
        out.append(tok[0])
    text = tokenizer.decode(out[:-1])  # the last token is EOS, which the grammar accepts at its end
    assert out[-1] == tokenizer.eos_token_id and text.endswith("!") and set(text[:-1]) <= set("abcd")
    state.sync(out[:1])  # as if the sequence were recomputed from its first token
    assert state.num_accepted == 1 and not state.is_terminated
    state.sync(out)  # and replayed
    assert state.is_terminated


def test_a_row_with_no_token_left_falls_back_to_the_grammar(grammars, tokenizer):
    """min_tokens bans EOS, but the grammar is complete and allows only EOS: the grammar wins."""
    state = grammars.new_state(choice("quick"))
    out = tokenizer.encode("quick")
    state.sync(out)
    eos = tokenizer.eos_token_id
    params = SamplingParams(temperature=1.0, seed=1, min_tokens=8, max_tokens=16)
    tok, _ = sample(torch.randn(1, MODEL_VOCAB), [SampleRow(params, [5], out, torch.Generator(), (eos,), state)])
    assert tok == [eos]


def test_logprobs_are_reported_after_masking(grammars):
    state = grammars.new_state(choice("Paged", "quick"))
    params = SamplingParams(temperature=0.0, logprobs=5)
    _, lps = sample(torch.randn(1, MODEL_VOCAB), [SampleRow(params, [5], [], None, (), state)])
    top = lps[0].top
    logits = torch.zeros(1, MODEL_VOCAB)
    apply_grammar_masks(logits, [grammars.new_state(choice("Paged", "quick"))])
    allowed = _allowed(logits[0])
    assert len(allowed) < 5 and {t for t, _ in top} == allowed  # the masked tokens are no alternatives
    assert abs(sum(torch.tensor([v for _, v in top]).exp().tolist()) - 1) < 1e-5  # all the mass is allowed


def test_logit_bias_is_added_and_bounded():
    params = SamplingParams(temperature=0.0, logit_bias={7: 100.0, 3: -100.0})
    logits = torch.zeros(2, 20)
    logits[:, 3] = 50
    tok, _ = sample(
        logits, [SampleRow(params, [1], [], None), SampleRow(SamplingParams(temperature=0.0), [1], [], None)]
    )
    assert tok == [7, 3]  # the second row has no bias
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(logit_bias={1: 100.5})
