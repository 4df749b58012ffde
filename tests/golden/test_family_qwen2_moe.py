"""Qwen2-MoE (Qwen2's q/k/v bias, top-k experts, and a shared expert under a sigmoid gate) from
safetensors: float32 greedy equals HF transformers token for token, with a dense layer between
sparse ones."""

from __future__ import annotations

import pytest
from family_goldens import assert_gguf_greedy_equals_hf, assert_greedy_equals_hf, build, make_model, write_gguf
from helpers import read_json

QWEN2_MOE = dict(
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    shared_expert_intermediate_size=80,
    num_hidden_layers=3,
    mlp_only_layers=[1],
)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("qwen2-moe") / "hf", "qwen2_moe", seed=3, **QWEN2_MOE)


def test_greedy_equals_hf(tmp_path, src):
    engine = build(src, tmp_path / "e")
    built = read_json(engine / "config.json")["pretrained_config"]
    assert built["moe_layers"] == [0, 2] and built["moe_shared_expert_intermediate_size"] == 80
    assert_greedy_equals_hf(engine, src)


def _gguf_experts(w):
    w.add_expert_count(QWEN2_MOE["num_experts"])
    w.add_expert_used_count(QWEN2_MOE["num_experts_per_tok"])
    w.add_expert_feed_forward_length(QWEN2_MOE["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(QWEN2_MOE["shared_expert_intermediate_size"])


def test_gguf_greedy_equals_hf(tmp_path):
    """llama.cpp's qwen2moe: every layer sparse, the shared expert as ffn_*_shexp and its gate as
    ffn_gate_inp_shexp; the top k as the released checkpoints route it (norm_topk_prob off)."""
    every = QWEN2_MOE | dict(mlp_only_layers=[], num_hidden_layers=2, norm_topk_prob=False)
    hf = make_model(tmp_path / "hf", "qwen2_moe", seed=4, **every)
    gguf = write_gguf(hf, tmp_path / "qwen2moe.gguf", "qwen2moe", permute=False, extra=_gguf_experts)
    assert_gguf_greedy_equals_hf(gguf, hf, tmp_path / "e")
