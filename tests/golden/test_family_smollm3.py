"""SmolLM3 (layers without RoPE: HF `no_rope_layers`, by default every `no_rope_layer_interval`-th)
from safetensors and from GGUF: float32 greedy equals HF transformers token for token."""

from __future__ import annotations

import json
import shutil

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

from trtserve.engine.errors import UserError


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    # layers 1 and 3 of 4 attend without RoPE
    return make_model(tmp_path_factory.mktemp("smollm3") / "hf", "smollm3", seed=5, num_hidden_layers=4,
                      no_rope_layer_interval=2)  # fmt: skip


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("smollm3-engine") / "e")


def test_the_engine_records_the_nope_layers(engine):
    assert read_json(engine / "config.json")["pretrained_config"]["rope_skip_layers"] == [1, 3]


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_an_explicit_no_rope_layers_list_greedy_equals_hf(tmp_path):
    m = make_model(tmp_path / "hf", "smollm3", seed=6, num_hidden_layers=3, no_rope_layers=[0, 1, 1])
    assert_greedy_equals_hf(build(m, tmp_path / "e"), m, seed=3)


def test_gguf_greedy_equals_hf(tmp_path):
    # llama.cpp fixes SmolLM3's NoPE interval at 4 (HF's default) and writes no key for it
    m = make_model(tmp_path / "hf", "smollm3", seed=7, num_hidden_layers=4)
    gguf = write_gguf(m, tmp_path / "smollm3.gguf", "smollm3", permute=True)
    assert_gguf_greedy_equals_hf(gguf, m, tmp_path / "e")


def test_a_bad_no_rope_layers_list_is_refused(tmp_path, src):
    shutil.copytree(src, tmp_path / "bad")
    (tmp_path / "bad" / "config.json").write_text(json.dumps(read_json(src / "config.json") | {"no_rope_layers": [1]}))
    with pytest.raises(UserError, match="no_rope_layers must hold a 0 or 1 for each of the 4 layers"):
        build(tmp_path / "bad", tmp_path / "e")
    assert not (tmp_path / "e").exists()
