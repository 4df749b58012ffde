"""Granite 3 (embedding, attention and residual multipliers, `logits_scaling`) from safetensors and
from GGUF: float32 greedy equals HF transformers token for token, logprobs too (the logits' scale)."""

from __future__ import annotations

import pytest
from family_goldens import (
    assert_decode_step_runs,
    assert_gguf_greedy_equals_hf,
    assert_greedy_equals_hf,
    assert_logprobs_equal_hf,
    build,
    make_model,
    write_gguf,
)

MULTIPLIERS = dict(embedding_multiplier=12.0, attention_multiplier=0.09, residual_multiplier=0.22, logits_scaling=4.0)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("granite") / "hf", "granite", seed=8, **MULTIPLIERS)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("granite-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_gguf_greedy_equals_hf(tmp_path, src):
    floats = {"embedding_scale": 12.0, "attention.scale": 0.09, "residual_scale": 0.22, "logit_scale": 4.0}
    gguf = write_gguf(src, tmp_path / "granite.gguf", "granite", permute=True, floats=floats)
    assert_gguf_greedy_equals_hf(gguf, src, tmp_path / "e")
