"""Qwen3-MoE (Qwen3 attention, a softmax top-k router over experts, dense layers between sparse ones)
from safetensors and from GGUF (llama.cpp's merged expert tensors): float32 greedy equals HF
transformers token for token; the experts path runs only the experts a step's tokens use; bad
checkpoints and unsupported pairs are refused in one sentence."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from family_goldens import (
    GREEDY,
    NEW_TOKENS,
    assert_decode_step_runs,
    assert_gguf_greedy_equals_hf,
    assert_greedy_equals_hf,
    assert_logprobs_equal_hf,
    build,
    make_model,
    write_gguf,
)
from helpers import make_lora_adapter, peft_greedy, random_prompts, read_json
from safetensors.torch import load_file, save_file

from trtserve import LLM
from trtserve.engine.errors import UserError
from trtserve.models.moe import Experts

# 8 experts, top 2: a prompt's tokens use most of them, a decode step of a few sequences leaves some idle
MOE = dict(head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("qwen3-moe") / "hf", "qwen3_moe", seed=3, **MOE)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("qwen3-moe-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_dense_layers_between_sparse_ones_and_unnormalized_weights(tmp_path):
    """mlp_only_layers and decoder_sparse_step leave layers 0 and 3 dense; norm_topk_prob off."""
    mixed = MOE | dict(num_hidden_layers=4, mlp_only_layers=[0, 3], decoder_sparse_step=1, norm_topk_prob=False)
    hf = make_model(tmp_path / "hf", "qwen3_moe", seed=5, **mixed)
    engine = build(hf, tmp_path / "e")
    built = read_json(engine / "config.json")["pretrained_config"]
    assert built["moe_layers"] == [1, 2] and built["moe"]["normalization_mode"] == 0
    assert_greedy_equals_hf(engine, hf, seed=2)


def test_a_step_runs_each_used_expert_once_and_no_other(engine, src, monkeypatch):
    """The C expert kernel and the torch path equal HF's sparse block; the torch path runs only the
    experts the step's tokens route to (test_kernel_experts.py checks the kernel reads no other)."""
    from transformers import AutoModelForCausalLM

    hf_block = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).model.layers[1].mlp
    experts = LLM(engine, kv_cache_memory=16 << 20).engine.model.layers[1].experts
    ran = []
    mlp = Experts._mlp
    monkeypatch.setattr(Experts, "_mlp", staticmethod(lambda x, *a: ran.append(x.shape[0]) or mlp(x, *a)))
    torch.manual_seed(0)
    for tokens in (1, 3, 40):
        x = torch.randn(tokens, 64)
        with torch.inference_mode():
            want = hf_block(x[None])[0]
            kernel = experts(x, torch.nn.functional.linear)  # its own float32 summation order: atol 1e-5
            torch.testing.assert_close(kernel, want, rtol=1e-5, atol=1e-5)
            ran.clear()
            got = experts.grouped(x, torch.nn.functional.linear)
            used = experts.route(x, torch.nn.functional.linear)[1].unique()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert len(ran) == len(used) and sum(ran) == tokens * 2, tokens  # each used expert once, over its tokens
    assert len(used) == 8  # 40 tokens reach every expert; 1 token reaches 2 of 8


def test_lora_on_attention_equals_peft_and_on_the_mlp_is_refused(tmp_path):
    hf = make_model(tmp_path / "hf", "qwen3_moe", seed=6, **MOE | dict(mlp_only_layers=[1]))
    engine = build(hf, tmp_path / "e")
    attn = make_lora_adapter(hf, tmp_path / "attn", ("q_proj", "v_proj", "o_proj"), 4, 8.0)
    prompts = random_prompts(3, seed=3, lo=5, hi=30)
    llm = LLM(engine, lora={"adapters": {"attn": str(attn)}}, kv_cache_memory=8 << 20)
    outs = llm.generate(prompts, GREEDY, adapter="attn")
    assert [o.token_ids for o in outs] == peft_greedy(hf, attn, prompts, NEW_TOKENS)
    mlp = make_lora_adapter(hf, tmp_path / "mlp", ("q_proj", "down_proj"), 4, 8.0)
    with pytest.raises(UserError, match="adapters on the MLP and experts of qwen3_moe models are not supported"):
        LLM(engine, lora={"adapters": {"mlp": str(mlp)}}, kv_cache_memory=8 << 20)


def _gguf_experts(w):
    w.add_expert_count(MOE["num_experts"])
    w.add_expert_used_count(MOE["num_experts_per_tok"])
    w.add_expert_feed_forward_length(MOE["moe_intermediate_size"])


def test_gguf_greedy_equals_hf(tmp_path, src):
    gguf = write_gguf(src, tmp_path / "qwen3moe.gguf", "qwen3moe", permute=False, extra=_gguf_experts)
    assert_gguf_greedy_equals_hf(gguf, src, tmp_path / "e")


def _edit(src, dest, weights=None, config=None):
    """A copy of src with its tensors passed through `weights` and config.json updated by `config`."""
    shutil.copytree(src, dest)
    if weights:
        save_file(weights(load_file(src / "model.safetensors")), dest / "model.safetensors")
    if config:
        (dest / "config.json").write_text(json.dumps(read_json(src / "config.json") | config))
    return dest


EXPERT = "model.layers.1.mlp.experts.3.up_proj.weight"
ROUTER = "model.layers.0.mlp.gate.weight"


@pytest.mark.parametrize(
    ("weights", "config", "match"),
    [
        (lambda w: {k: v for k, v in w.items() if k != EXPERT}, None, f"lacks expert tensor {EXPERT}"),
        (lambda w: {k: v for k, v in w.items() if k != ROUTER}, None, f"lacks 1 tensor.*e.g. {ROUTER}"),
        (None, {"num_experts": 6, "num_local_experts": 6}, r"has shape \[8, .* but config.json implies \[6, "),
        (None, {"moe_intermediate_size": 32}, r"has shape \[8, 48, 64\] but config.json implies \[8, 32, 64\]"),
        (None, {"num_experts_per_tok": 9}, "num_experts_per_tok 9 must be between 1 and the 8 experts"),
    ],
    ids=["missing-expert", "missing-router", "num-experts", "expert-width", "top-k"],
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
        (dict(quant="fp8"), "--quant fp8 is not supported for qwen3_moe models"),
        (dict(quant="w4a16_awq"), "--quant w4a16_awq is not supported for qwen3_moe models"),
        (dict(backend="tensorrt"), "backend tensorrt does not build qwen3_moe models yet; use --backend torch"),
    ],
    ids=["fp8", "w4a16_awq", "tensorrt"],
)
def test_unsupported_pairs_are_refused(tmp_path, src, settings, match):
    with pytest.raises(UserError, match=match):
        build(src, tmp_path / "e", **settings)
    assert not (tmp_path / "e").exists()
