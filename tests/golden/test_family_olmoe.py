"""OLMoE (Llama attention with q and k each RMS-normed over all their heads at once, every layer's MLP
the top 8 of 64 experts, not renormalized by default) from safetensors and from GGUF (llama.cpp's
`olmoe`, merged expert tensors): float32 greedy equals HF transformers token for token; the experts
run on the C expert kernel; bad checkpoints are refused in one sentence."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
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

from trtserve import LLM
from trtserve.engine.errors import UserError

# OLMoE-1B-7B's routing (top 8 of 64) at a width that fits a test: a prompt reaches most experts, a
# decode step of one sequence 8 of them
OLMOE = dict(num_experts=64, num_experts_per_tok=8, intermediate_size=32)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("olmoe") / "hf", "olmoe", seed=3, **OLMOE)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("olmoe-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_q_and_k_norms_span_all_heads_and_the_experts_run_on_the_kernel(engine, monkeypatch):
    """The norms' weights are q_size and kv_size wide (HF's OlmoeRMSNorm over the projection), as the C
    decode step and pointwise kernels run them; the experts run on the expert kernel."""
    assert_decode_step_runs(engine, monkeypatch)
    model = LLM(engine, device="cpu", kv_cache_memory=16 << 20).engine.model
    cfg = model.cfg
    assert model.layers[0].q_norm.shape == (cfg.num_attention_heads * cfg.head_size,)
    assert model.layers[0].k_norm.shape == (cfg.num_key_value_heads * cfg.head_size,)
    assert cfg.moe.top_k == 8 and cfg.moe.normalization_mode == 0  # norm_topk_prob off
    assert all(layer.experts.packed is not None for layer in model.layers)  # the kernel's view of the weights


def test_renormalized_top_k(tmp_path):
    hf = make_model(tmp_path / "hf", "olmoe", seed=5, **OLMOE | dict(norm_topk_prob=True))
    engine = build(hf, tmp_path / "e")
    assert read_json(engine / "config.json")["pretrained_config"]["moe"]["normalization_mode"] == 1
    assert_greedy_equals_hf(engine, hf, seed=2)


def _gguf_experts(w):
    w.add_expert_count(OLMOE["num_experts"])
    w.add_expert_used_count(OLMOE["num_experts_per_tok"])


def test_gguf_greedy_equals_hf(tmp_path, src):
    gguf = write_gguf(src, tmp_path / "olmoe.gguf", "olmoe", permute=False, extra=_gguf_experts)
    assert_gguf_greedy_equals_hf(gguf, src, tmp_path / "e")


ROUTER = "model.layers.1.mlp.gate.weight"


def _bad(src, dest, weights=None, config=None):
    shutil.copytree(src, dest)
    if weights:
        save_file(weights(load_file(src / "model.safetensors")), dest / "model.safetensors")
    if config:
        (dest / "config.json").write_text(json.dumps(read_json(src / "config.json") | config))
    return dest


@pytest.mark.parametrize(
    ("weights", "config", "match"),
    [
        (lambda w: {k: v for k, v in w.items() if k != ROUTER}, None, f"lacks 1 tensor.*e.g. {ROUTER}"),
        (None, {"num_experts": 32}, r"has shape \[64, .* but config.json implies \[32, "),
        (None, {"clip_qkv": 8.0}, "clip_qkv 8.0 .* is not supported for olmoe models"),
        (
            lambda w: w | {"model.layers.0.self_attn.q_norm.weight": torch.ones(16)},
            None,
            r"q_norm.weight has shape \[16\] but config.json implies \[64\]",
        ),
    ],
    ids=["missing-router", "num-experts", "clip-qkv", "per-head-q-norm"],
)
def test_bad_checkpoints_are_refused_in_one_sentence(tmp_path, src, weights, config, match):
    bad = _bad(src, tmp_path / "bad", weights, config)
    with pytest.raises(UserError, match=match) as err:
        build(bad, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()
