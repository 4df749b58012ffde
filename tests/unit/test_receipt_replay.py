"""Replay's pure parts: the engine check, the prompt of a `hashes` receipt, and the comparison."""

from __future__ import annotations

import pytest

from trtserve.engine.errors import UserError
from trtserve.engine.options import EngineOptions
from trtserve.serve.receipts.model import EngineIdentity, Receipt, token_sha256
from trtserve.serve.receipts.replay import (
    ReplayResult,
    ReplaySequence,
    check_engine,
    compare,
    options_of,
    prompt_of,
)

ENGINE = EngineIdentity(
    fingerprint="a" * 64,
    backend="torch",
    platform="trtserve_torch",
    backend_version="0",
    trtserve_version="0",
    options={"deterministic": True},
)
PROMPT = [5, 6, 7]


def _receipt(tokens=(1, 2, 3), logprobs=(-0.5, -0.25, -1.0), **kw) -> Receipt:
    data = dict(
        id="rcpt-x",
        created_at=0.0,
        mode="on",
        model="m",
        model_version="1",
        engine=ENGINE,
        protocol="http",
        client_id="c",
        params={"seed": 3, "max_tokens": 3},
        prompt_token_ids=PROMPT,
        prompt_sha256=token_sha256(PROMPT),
        num_prompt_tokens=3,
        outputs=[
            {
                "index": 0,
                "token_ids": list(tokens),
                "sha256": token_sha256(list(tokens)),
                "logprobs": list(logprobs),
                "finish_reason": "length",
            }
        ],
        cache={"namespace": None, "context_version": None, "salted": False, "cached_tokens": 0},
        timings={"queue_s": 0.0, "ttft_s": 0.1, "e2e_s": 0.2},
        ok=True,
    )
    return Receipt.model_validate(data | kw)


def _result(tokens, logprobs, engine=ENGINE, cached=0) -> ReplayResult:
    seq = ReplaySequence(index=0, token_ids=list(tokens), logprobs=list(logprobs), finish_reason="length")
    return ReplayResult(engine=engine, outputs=[seq], cached_tokens=cached)


def test_identical_means_every_token_and_logprob_equal():
    report = compare(_receipt(), _result([1, 2, 3], [-0.5, -0.25, -1.0]), other_engine=False)
    assert report.identical and report.text() == "identical: rcpt-x replays bit for bit (3 output tokens)"


def test_the_first_differing_position_names_both_tokens_and_logprobs():
    report = compare(_receipt(), _result([1, 9, 3], [-0.5, -2.0, -1.0]), other_engine=False)
    d = report.difference
    assert not report.identical and (d.position, d.receipt_token, d.replay_token) == (1, 2, 9)
    assert (d.receipt_logprob, d.replay_logprob) == (-0.25, -2.0)
    assert "position 1: receipt token 2 (logprob -0.25), replay token 9 (logprob -2.0)" in report.text()
    only_lp = compare(_receipt(), _result([1, 2, 3], [-0.5, -0.25, -1.0000001]), other_engine=False)
    assert only_lp.difference.position == 2  # a bitwise replay compares logprobs too
    shorter = compare(_receipt(), _result([1, 2], [-0.5, -0.25]), other_engine=False)
    assert (shorter.difference.position, shorter.difference.replay_token) == (2, None)


def test_another_engine_is_refused_unless_allowed_and_then_said():
    other = ENGINE.model_copy(update={"fingerprint": "b" * 64, "options": {}})
    with pytest.raises(UserError, match="--allow-other-engine"):
        check_engine(_receipt(), other, allow_other_engine=False)
    assert check_engine(_receipt(), other, allow_other_engine=True)
    assert not check_engine(_receipt(), ENGINE, allow_other_engine=False)
    text = compare(_receipt(), _result([1, 2, 3], [-0.5, -0.25, -1.0], other, cached=16), True).text()
    assert "replayed on another engine" in text and "not deterministic" in text
    assert "the original took 0 prompt tokens from the cache, the replay 16" in text


def test_a_hashes_receipt_needs_the_prompt_and_checks_its_sha256():
    hashed = _receipt(mode="hashes", prompt_token_ids=None)
    with pytest.raises(UserError, match="--prompt-ids"):
        prompt_of(hashed)
    with pytest.raises(UserError, match="sha256"):
        prompt_of(hashed, [5, 6, 8])
    assert prompt_of(hashed, PROMPT) == PROMPT


def test_a_replay_with_other_engine_options_says_which():
    int8 = ENGINE.model_copy(update={"options": {"deterministic": True, "int8_activations": True}})
    text = compare(_receipt(engine=int8), _result([1, 2, 3], [-0.5, -0.25, -1.0]), other_engine=False).text()
    assert "engine option int8_activations differs: the original ran with True, the replay with False" in text
    same = compare(_receipt(engine=int8), _result([1, 2, 3], [-0.5, -0.25, -1.0], int8), other_engine=False).text()
    assert "differs" not in same
    assert options_of(_receipt(engine=int8)) == EngineOptions(deterministic=True, int8_activations=True)
    future = ENGINE.model_copy(update={"options": {"speculation": "eagle"}})
    with pytest.raises(UserError, match="engine options .*speculation.* that this trtserve cannot set"):
        options_of(_receipt(engine=future))


@pytest.mark.parametrize(
    ("fields", "options"),
    [
        ({"deterministic": True, "int8_activations": True}, {"deterministic": True, "int8_activations": True}),
        ({"deterministic": True}, {"deterministic": True}),  # before int8_activations was recorded
        ({"deterministic": False, "int8_activations": False}, {}),
    ],
)
def test_receipts_written_before_the_options_table_read_back(fields, options):
    old = ENGINE.model_dump(exclude={"options"}) | fields
    engine = Receipt.model_validate(_receipt().model_dump() | {"engine": old}).engine
    assert engine.options == options and engine.deterministic is fields["deterministic"]
    assert EngineIdentity.model_validate_json(engine.model_dump_json()) == engine  # written back in the new form
