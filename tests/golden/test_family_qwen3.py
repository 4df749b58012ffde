"""Qwen3 (per-head q/k RMSNorm before RoPE, explicit head_dim, no qkv bias) from safetensors and from
GGUF: float32 greedy equals HF transformers token for token; bad checkpoints are refused."""

from __future__ import annotations

import json

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
from helpers import read_json
from safetensors.torch import load_file, save_file

from trtserve.engine.errors import UserError

QWEN3 = dict(head_dim=32, num_key_value_heads=1)  # q_size 128 != hidden 64: head_dim is its own


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("qwen3") / "hf", "qwen3", seed=3, **QWEN3)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("qwen3-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_tied_embeddings_greedy_equals_hf(tmp_path):
    tied = make_model(tmp_path / "hf", "qwen3", seed=4, tie_word_embeddings=True, **QWEN3)
    assert_greedy_equals_hf(build(tied, tmp_path / "e"), tied, seed=2)


def test_gguf_greedy_equals_hf(tmp_path, src):
    gguf = write_gguf(src, tmp_path / "qwen3.gguf", "qwen3", permute=False)
    assert_gguf_greedy_equals_hf(gguf, src, tmp_path / "e")


def _edit(src, dest, weights=None, config=None):
    """A copy of src with its tensors passed through `weights` and config.json updated by `config`."""
    import shutil

    shutil.copytree(src, dest)
    if weights:
        save_file(weights(load_file(src / "model.safetensors")), dest / "model.safetensors")
    if config:
        (dest / "config.json").write_text(json.dumps(read_json(src / "config.json") | config))
    return dest


NORM = "model.layers.1.self_attn.k_norm.weight"


@pytest.mark.parametrize(
    ("weights", "config", "match"),
    [
        (lambda w: {k: v for k, v in w.items() if k != NORM}, None, f"lacks 1 tensor.*e.g. {NORM}"),
        (
            lambda w: {k.replace("k_norm", "k_layernorm"): v for k, v in w.items()},
            None,
            "lacks 2 tensor.*k_norm.weight",
        ),
        (None, {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}}, "rope type 'dynamic'"),
        (None, {"attention_bias": True}, r"qwen3 with attention_bias=True is not supported \(qkv_bias\)"),
    ],
    ids=["missing-tensor", "misnamed-tensor", "unknown-rope", "qkv-bias"],
)
def test_bad_checkpoints_are_refused_in_one_sentence(tmp_path, src, weights, config, match):
    bad = _edit(src, tmp_path / "bad", weights, config)
    with pytest.raises(UserError, match=match) as err:
        build(bad, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        (dict(backend="tensorrt"), "backend tensorrt does not build qwen3 models yet; use --backend torch"),
    ],
    ids=["backend"],
)
def test_unsupported_pairs_are_refused(tmp_path, src, settings, match):
    with pytest.raises(UserError, match=match):
        build(src, tmp_path / "e", **settings)
    assert not (tmp_path / "e").exists()
