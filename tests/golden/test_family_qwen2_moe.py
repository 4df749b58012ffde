"""Qwen2-MoE (Qwen2's q/k/v bias, top-k experts, and a shared expert under a sigmoid gate) from
safetensors: float32 greedy equals HF transformers token for token, with a dense layer between
sparse ones."""

from __future__ import annotations

import pytest
from family_goldens import assert_greedy_equals_hf, build, make_model
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
