"""Mixtral (Mistral's attention, every layer's MLP the top 2 of 8 experts) from safetensors
(block_sparse_moe.experts.{e}.w1/w2/w3): float32 greedy equals HF transformers token for token;
an expert count the tensors disagree with is refused in one sentence."""

from __future__ import annotations

import json
import shutil

import pytest
from family_goldens import assert_greedy_equals_hf, assert_logprobs_equal_hf, build, make_model
from helpers import read_json

from trtserve import LLM
from trtserve.engine.errors import UserError

MIXTRAL = dict(num_local_experts=8, num_experts_per_tok=2)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("mixtral") / "hf", "mixtral", seed=3, **MIXTRAL)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("mixtral-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_the_pointwise_kernels_run_around_the_experts(engine):
    """The experts are outside the one-call decode step, not outside the per-token glue kernels."""
    model = LLM(engine, device="cpu", kv_cache_memory=16 << 20).engine.model
    assert model.step_weights is None and model.use_pointwise
    assert all(layer.experts is not None and layer.fc_gate is None for layer in model.layers)


def test_inspect_reports_total_and_active_parameters(engine):
    from trtserve.build.inspect import summarize

    info = summarize(engine)
    expert = 3 * 96 * 64  # w1, w3 (96, 64) and w2 (64, 96)
    assert info["experts"] == 8 and info["experts_per_token"] == 2
    assert info["parameters"] - info["active_parameters"] == 2 * 6 * expert  # 2 layers, 6 idle experts each


def test_an_expert_count_the_tensors_disagree_with_is_refused(tmp_path, src):
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    (bad / "config.json").write_text(json.dumps(read_json(src / "config.json") | {"num_local_experts": 4}))
    with pytest.raises(UserError, match=r"has shape \[8, .*\] but config.json implies \[4, ") as err:
        build(bad, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_the_tensorrt_backend_is_refused(tmp_path, src):
    with pytest.raises(UserError, match="backend tensorrt does not build mixtral models yet; use --backend torch"):
        build(src, tmp_path / "e", backend="tensorrt")
    assert not (tmp_path / "e").exists()
