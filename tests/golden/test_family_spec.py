"""A model family is one spec. A toy family registered here, whose checkpoints name every tensor
differently, builds through the normal build path into the same engine weights as the same
tensors under Llama's names, and generates the same greedy tokens (which equal HF transformers').
A family declaring a layer feature the fast paths (the one-call decode step, the pointwise
kernels) lack is refused them at load and runs torch ops, with the same output."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace

import pytest
import torch
from helpers import hf_greedy, make_hf_model, random_prompts, read_json
from safetensors.torch import load_file, save_file

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.kernels import decode_layers, pointwise
from trtserve.models import features, llama, mistral, qwen2
from trtserve.models.family import DecoderFamily
from trtserve.models.layout import EMBED, LLAMA, LM_HEAD, Names
from trtserve.models.registry import register_family, unregister_family

TOY_NAMES = Names(
    model={EMBED: "backbone.tok_embeddings", "final_norm": "backbone.norm_f", LM_HEAD: "head.out"},
    layer_prefix="backbone.blocks.{i}.",
    layer={
        "input_norm": "ln_attn",
        "q_proj": "attn.wq",
        "k_proj": "attn.wk",
        "v_proj": "attn.wv",
        "o_proj": "attn.wo",
        "post_norm": "ln_ffn",
        "gate_proj": "ffn.w1",
        "up_proj": "ffn.w3",
        "down_proj": "ffn.w2",
    },
)
TOY = DecoderFamily(
    name="toylm",
    hf_architectures=("ToyLMForCausalLM",),
    trtllm_architecture="ToyLMForCausalLM",
    layout=LLAMA,
    hf=TOY_NAMES,
    gguf=None,
    features=llama.FEATURES,
    config_features=llama.CONFIG_FEATURES,
)
# The same family with a layer feature decode_layers.c does not implement.
TOY_UNFUSED = replace(
    TOY,
    name="toylm-unfused",
    hf_architectures=("ToyLMUnfusedForCausalLM",),
    trtllm_architecture="ToyLMUnfusedForCausalLM",
    features=llama.FEATURES | {"toy_feature"},
)
GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


@pytest.fixture
def register():
    """register_family for this test only: every family it adds is removed again afterwards."""
    added = []

    def add(fam: DecoderFamily) -> DecoderFamily:
        register_family(fam)
        added.append(fam.name)
        return fam

    yield add
    for name in added:
        unregister_family(name)


@pytest.fixture(scope="module")
def llama_src(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("family") / "llama", "llama", seed=5)


def as_family(src, dest, fam: DecoderFamily):
    """The Llama checkpoint at src, every tensor renamed to fam's names, config.json naming fam."""
    renames = {}
    for role in LLAMA.model:
        renames[llama.HF_NAMES.module(role)] = fam.hf.module(role)
    for i in range(read_json(src / "config.json")["num_hidden_layers"]):
        for role in LLAMA.layer:
            renames[llama.HF_NAMES.module(role, i)] = fam.hf.module(role, i)
    shutil.copytree(src, dest)
    weights = {}
    for name, t in load_file(src / "model.safetensors").items():
        module, suffix = name.rsplit(".", 1)
        weights[f"{renames[module]}.{suffix}"] = t
    save_file(weights, dest / "model.safetensors")
    cfg = read_json(src / "config.json") | {"architectures": list(fam.hf_architectures), "model_type": fam.name}
    (dest / "config.json").write_text(json.dumps(cfg))
    return dest


def build(src, out):
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), out, quiet=True)
    return out


def test_a_registered_family_builds_and_runs_like_llama(tmp_path, register, llama_src):
    register(TOY)
    toy_src = as_family(llama_src, tmp_path / "toy", TOY)
    assert "model.embed_tokens.weight" not in load_file(toy_src / "model.safetensors")
    toy, ref = build(toy_src, tmp_path / "toy-engine"), build(llama_src, tmp_path / "llama-engine")
    for f in ("model.safetensors", "checkpoint/rank0.safetensors"):
        got, want = load_file(toy / f), load_file(ref / f)
        assert got.keys() == want.keys() and all(torch.equal(got[n], want[n]) for n in want), f
    got_cfg, want_cfg = (
        read_json(toy / "config.json")["pretrained_config"],
        read_json(ref / "config.json")["pretrained_config"],
    )
    assert got_cfg.pop("architecture") == "ToyLMForCausalLM"
    assert got_cfg == {k: v for k, v in want_cfg.items() if k != "architecture"}
    prompts = random_prompts(4, seed=2)
    toy_out = [o.token_ids for o in LLM(toy).generate(prompts, GREEDY)]
    assert toy_out == [o.token_ids for o in LLM(ref).generate(prompts, GREEDY)]
    assert toy_out == hf_greedy(llama_src, prompts, GREEDY.max_tokens)


def test_a_feature_the_decode_step_lacks_refuses_it(tmp_path, register, llama_src, caplog):
    register(TOY_UNFUSED)
    eng = build(as_family(llama_src, tmp_path / "toy", TOY_UNFUSED), tmp_path / "toy-engine")
    with caplog.at_level(logging.INFO, logger="trtserve.models.decoder"):
        slow = LLM(eng, device="cpu", enable_prefix_caching=False)  # the step and the pointwise kernels are CPU code
    assert slow.engine.model.step_weights is None and not slow.engine.model.use_pointwise
    assert [r.getMessage() for r in caplog.records if "toy_feature" in r.getMessage()] == [
        f"{what} not used: no support for this model's toy_feature"
        for what in ("the one-call decode step", "the pointwise kernels")
    ]
    fast = LLM(build(llama_src, tmp_path / "llama-engine"), device="cpu", enable_prefix_caching=False)
    assert fast.engine.model.step_weights is not None and fast.engine.model.use_pointwise
    prompts = random_prompts(3, seed=9, lo=1)
    assert [o.token_ids for o in slow.generate(prompts, GREEDY)] == [
        o.token_ids for o in fast.generate(prompts, GREEDY)
    ]


def test_registration_refuses_conflicts_and_incomplete_specs(register):
    with pytest.raises(ValueError, match="the name 'llama' is taken; LlamaForCausalLM is llama's"):
        register_family(llama.FAMILY)
    with pytest.raises(ValueError, match="shares LlamaForCausalLM with llama but not its layout and features"):
        register_family(replace(TOY_UNFUSED, trtllm_architecture="LlamaForCausalLM"))
    partial = Names(
        TOY_NAMES.model, TOY_NAMES.layer_prefix, {k: v for k, v in TOY_NAMES.layer.items() if k != "o_proj"}
    )
    with pytest.raises(ValueError, match="its HF names do not cover the layout's roles exactly"):
        register_family(replace(TOY, hf=partial))
    register(replace(TOY, trtllm_architecture="LlamaForCausalLM"))  # same computation: may share it


@pytest.mark.parametrize("kernels", [decode_layers, pointwise], ids=["decode_layers", "pointwise"])
def test_builtin_families_take_the_fast_paths(kernels):
    assert kernels.FEATURES <= features.FEATURES  # the kernels' names are the vocabulary's
    for fam in (llama.FAMILY, mistral.FAMILY, qwen2.FAMILY):
        assert fam.features | fam.config_features <= kernels.FEATURES, fam.name
