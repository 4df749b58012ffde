"""Mixtral (Mistral's attention, every layer's MLP the top 2 of 8 experts) from safetensors
(block_sparse_moe.experts.{e}.w1/w2/w3): float32 greedy equals HF transformers token for token;
an expert count the tensors disagree with is refused in one sentence."""

from __future__ import annotations

import json
import shutil

import pytest
from family_goldens import (
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


def test_the_one_call_decode_step_runs_the_experts(engine):
    """Every layer's experts run inside the one-call decode step (the greedy goldens above decode
    through it), on the expert kernel; the per-token glue kernels run around them in prefill."""
    model = LLM(engine, device="cpu", kv_cache_memory=16 << 20).engine.model
    assert model.use_pointwise and all(layer.experts is not None and layer.fc_gate is None for layer in model.layers)
    if model.step_weights is not None:  # where this machine builds the C kernels (not TRTSERVE_ISA=scalar)
        assert [p.struct.E for p in model.step_weights.experts] == [8, 8]
        assert all(layer.experts.packed is not None for layer in model.layers)


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


# HF's Mixtral modules under the names family_goldens.write_gguf maps to llama.cpp's (its converter's map)
_AS_LLAMA_CPP = {"block_sparse_moe.gate": "mlp.gate", ".w1.": ".gate_proj.", ".w3.": ".up_proj.", ".w2.": ".down_proj."}


def _llama_cpp_names(src, dest):
    """A copy of src whose expert tensors carry the names write_gguf merges into ffn_*_exps."""
    shutil.copytree(src, dest)
    renamed = {}
    for name, t in load_file(src / "model.safetensors").items():
        for old, new in _AS_LLAMA_CPP.items():
            name = name.replace("block_sparse_moe.experts", "mlp.experts").replace(old, new)
        renamed[name] = t
    save_file(renamed, dest / "model.safetensors")
    return dest


def _gguf_experts(w):
    w.add_expert_count(MIXTRAL["num_local_experts"])
    w.add_expert_used_count(MIXTRAL["num_experts_per_tok"])


def test_gguf_greedy_equals_hf(tmp_path, src):
    """llama.cpp writes Mixtral as `llama` with an expert count, q/k rows permuted, experts merged."""
    renamed = _llama_cpp_names(src, tmp_path / "renamed")
    gguf = write_gguf(renamed, tmp_path / "mixtral.gguf", "llama", permute=True, extra=_gguf_experts)
    assert_gguf_greedy_equals_hf(gguf, src, tmp_path / "e")
    assert read_json(tmp_path / "e" / "config.json")["pretrained_config"]["architecture"] == "MixtralForCausalLM"


def test_a_gguf_whose_expert_count_disagrees_with_its_tensors_is_refused(tmp_path, src):
    renamed = _llama_cpp_names(src, tmp_path / "renamed")

    def four_experts(w):
        w.add_expert_count(4)
        w.add_expert_used_count(2)

    gguf = write_gguf(renamed, tmp_path / "bad.gguf", "llama", permute=True, extra=four_experts)
    with pytest.raises(UserError, match=r"has shape \[8, .*\] but .* implies \[4, ") as err:
        build(gguf, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_a_gguf_with_one_tensor_per_expert_is_refused(tmp_path):
    """Older llama.cpp files store Mixtral's experts one tensor each (blk.0.ffn_gate.3.weight)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(tmp_path / "old.gguf"), "llama")
    w.add_block_count(1)
    w.add_expert_count(8)
    w.add_tensor("blk.0.ffn_gate.3.weight", np.zeros((96, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UserError, match=r"stores one tensor per expert \(blk.0.ffn_gate.3.weight\)") as err:
        build(tmp_path / "old.gguf", tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()
