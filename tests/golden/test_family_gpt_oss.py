"""gpt-oss (q/k/v/o biases, a sink logit per head, sliding-window and full layers alternating, YaRN RoPE,
every layer's MLP the top 4 of 16 biased experts under a biased router, with the clamped SwiGLU) from
safetensors, plain and with MXFP4 experts: float32 greedy equals HF transformers token for token; the experts
run on the C expert kernel; bad checkpoints are refused in one sentence, leaving nothing."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from family_goldens import (
    GREEDY,
    NEW_TOKENS,
    assert_greedy_equals_hf,
    assert_logprobs_equal_hf,
    assert_speculative_greedy_equals_hf,
    assert_windows_matter,
    build,
    hf_model,
    make_model,
)
from helpers import greedy_of, random_prompts, read_json
from safetensors.torch import load_file, save_file

from trtserve import LLM
from trtserve.build.hf_reader import HFReader
from trtserve.build.stored import E2M1
from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.kernels import experts as expert_kernel
from trtserve.models.rope import Rope

# YaRN as the released checkpoints scale it (factor 32 over 4096), shrunk to the tiny context
YARN = dict(
    rope_type="yarn", rope_theta=150000.0, factor=4.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
    original_max_position_embeddings=64,
)  # fmt: skip
# 16 experts, 4 a token: a prompt reaches most, a decode step 4; a window of 8 that the prompts outgrow; a
# SwiGLU limit the random activations reach
GPT_OSS = dict(
    num_local_experts=16, num_experts_per_tok=4, intermediate_size=32, head_dim=16, sliding_window=8,
    swiglu_limit=2.0, rope_parameters=YARN,
)  # fmt: skip
EXPERTS = "model.layers.{i}.mlp.experts."


def _with_random_biases(src):
    """HF initializes the experts' biases to zero: random ones, so the goldens test them."""
    w = load_file(src / "model.safetensors")
    g = torch.Generator().manual_seed(0)
    w = {k: v + 0.2 * torch.randn(v.shape, generator=g) if k.endswith("_bias") else v for k, v in w.items()}
    save_file(w, src / "model.safetensors", metadata={"format": "pt"})
    return src


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return _with_random_biases(make_model(tmp_path_factory.mktemp("gpt-oss") / "hf", "gpt_oss", seed=3, **GPT_OSS))


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("gpt-oss-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_speculative_greedy_equals_hf(engine, src):
    assert_speculative_greedy_equals_hf(engine, src)


def test_deterministic_greedy_equals_hf(engine, src):
    """The batch-invariant attention adds each head's sink to its online softmax."""
    prompts = random_prompts(3, seed=2, lo=20, hi=70)
    llm = LLM(engine, kv_cache_memory=16 << 20, deterministic=True)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == greedy_of(hf_model(src), prompts, NEW_TOKENS)


def test_windows_and_sinks_matter_and_the_experts_run_in_c(engine, src):
    """The goldens test the windows and the sinks (without either the tokens leave HF's); the experts run on
    the C expert kernel, op by op and inside the one-call decode step where it takes the model, and the glue
    around them on the pointwise kernels."""
    from dataclasses import replace

    assert_windows_matter(engine, src)
    prompts = random_prompts(6, seed=1, lo=1, hi=70)
    expected = greedy_of(hf_model(src), prompts, NEW_TOKENS)
    llm = LLM(engine, kv_cache_memory=16 << 20)
    model = llm.engine.model
    assert [a.window for a in model.attention] == [8, None]  # layer_types: sliding, full
    runs = expert_kernel.load() is not None  # not under TRTSERVE_ISA=scalar
    assert all((layer.experts.packed is not None) == runs and layer.dense_bias is not None for layer in model.layers)
    assert model.step_weights is None or len(model.step_weights.experts) == len(model.layers)
    assert model.use_pointwise == runs  # the per-token glue in C too (its experts are outside that glue)
    model.step_weights = None  # op by op, so the attention below runs without its sinks
    model.attention = [replace(a, sinks=None) for a in model.attention]
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] != expected


def test_several_experts_active_some_idle(engine):
    model = LLM(engine, device="cpu", kv_cache_memory=16 << 20).engine.model
    experts = model.layers[0].experts
    x = torch.randn(60, model.cfg.hidden_size)
    used = experts.route(x, model.linear)[1].unique().numel()
    assert 4 < used <= 16 and experts.route(x[:1], model.linear)[1].unique().numel() == 4
    if experts.packed is not None:  # the C expert kernel's biases, top-k softmax and clamped SwiGLU
        for rows in (x[:1], x):
            before, got = experts.reads.read, experts(rows, model._mm)
            assert experts.reads.read - before == experts.route(rows, model.linear)[1].unique().numel()
            torch.testing.assert_close(got, experts.grouped(rows, model._mm), rtol=1e-5, atol=1e-5)


def test_yarn_rope_equals_hf(engine, src):
    """The cos/sin tables (YaRN's frequencies and attention factor) equal HF's GptOssRotaryEmbedding's."""
    from transformers import AutoConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    hf = GptOssRotaryEmbedding(AutoConfig.from_pretrained(src))
    cos, sin = hf(torch.zeros(1), torch.arange(200)[None])  # (1, 200, head_dim / 2)
    cfg = ModelConfig(**read_json(engine / "config.json")["pretrained_config"])
    ours = Rope(cfg, 200, torch.float32, torch.device("cpu"))
    half = cfg.head_size // 2
    assert hf.attention_scaling != 1.0
    assert torch.equal(ours.cos[:, :half], cos[0]) and torch.equal(ours.signed_sin[:, half:], sin[0])


def _to_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 blocks (..., out, in / 32, 16) and scales (..., out, in / 32) of w (..., out, in): each 32 values
    share the power of two that brings their largest within E2M1's 6, each the nearest E2M1 value."""
    groups = w.unflatten(-1, (-1, 32))  # (..., out, G, 32)
    exp = torch.ceil(torch.log2(groups.abs().amax(-1).clamp(min=2**-100) / 6.0)).clamp(-127, 127)
    lut = torch.tensor(E2M1)
    codes = ((groups / torch.exp2(exp)[..., None])[..., None] - lut).abs().argmin(-1).to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4), (exp + 127).to(torch.uint8)


def _mxfp4_checkpoint(src, dest, block_bytes: int = 16):
    """src with its experts' weights as MXFP4 (`*_blocks`, `*_scales`, out-major as the released
    checkpoints store them) and quantization_config.quant_method mxfp4."""
    shutil.copytree(src, dest)
    w = load_file(src / "model.safetensors")
    for name in [n for n in w if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        blocks, scales = _to_mxfp4(w.pop(name).transpose(1, 2))  # HF's (E, in, out) -> (E, out, in)
        w[name + "_blocks"], w[name + "_scales"] = blocks[..., :block_bytes].contiguous(), scales
    save_file(w, dest / "model.safetensors", metadata={"format": "pt"})
    cfg = read_json(src / "config.json") | {"quantization_config": {"quant_method": "mxfp4"}}
    (dest / "config.json").write_text(json.dumps(cfg))
    return dest


def test_mxfp4_experts_dequantize_as_hf_and_greedy_equals_hf(tmp_path, src):
    from transformers import AutoModelForCausalLM, Mxfp4Config
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    mx = _mxfp4_checkpoint(src, tmp_path / "mx")
    stored, reader = load_file(mx / "model.safetensors"), HFReader(mx)
    for i in range(2):
        p = EXPERTS.format(i=i)
        gate_up = convert_moe_packed_tensors(stored[p + "gate_up_proj_blocks"], stored[p + "gate_up_proj_scales"])
        down = convert_moe_packed_tensors(stored[p + "down_proj_blocks"], stored[p + "down_proj_scales"])
        assert torch.equal(reader.load(p + "gate_proj.weight"), gate_up[..., 0::2].transpose(1, 2))
        assert torch.equal(reader.load(p + "up_proj.weight"), gate_up[..., 1::2].transpose(1, 2))
        assert torch.equal(reader.load(p + "down_proj.weight"), down.transpose(1, 2))
        assert reader.shape(p + "up_proj.weight") == (16, 32, 64)
    engine = build(mx, tmp_path / "e", dtype="float32")
    hf = AutoModelForCausalLM.from_pretrained(
        mx, dtype=torch.float32, quantization_config=Mxfp4Config(dequantize=True)
    ).eval()
    prompts = random_prompts(4, seed=4, lo=1, hi=70)
    expected = greedy_of(hf, prompts, NEW_TOKENS)
    llm = LLM(engine, kv_cache_memory=16 << 20)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == expected
    assert expected != greedy_of(hf_model(src), prompts, NEW_TOKENS)  # the MXFP4 weights are the ones run


ROUTER = "model.layers.1.mlp.router.weight"


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
        (None, {"num_local_experts": 8}, r"router.weight has shape \[16, 64\] but config.json implies \[8, 64\]"),
        (None, {"attention_bias": False}, "attention_bias false is not supported"),
        (None, {"quantization_config": {"quant_method": "fp8"}}, "quant_method 'fp8' is not read for gpt_oss"),
    ],
    ids=["missing-router", "num-experts", "no-attention-bias", "other-quantization"],
)
def test_bad_checkpoints_are_refused_in_one_sentence(tmp_path, src, weights, config, match):
    bad = _bad(src, tmp_path / "bad", weights, config)
    with pytest.raises(UserError, match=match) as err:
        build(bad, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("block_bytes", "match"),
    [(8, "has blocks of 16 values; trtserve reads MXFP4 blocks of 32 values"), (16, "scales .* have shape")],
    ids=["block-size", "scales-shape"],
)
def test_bad_mxfp4_is_refused_in_one_sentence(tmp_path, src, block_bytes, match):
    mx = _mxfp4_checkpoint(src, tmp_path / "mx", block_bytes)
    if block_bytes == 16:  # scales for half the blocks
        w = load_file(mx / "model.safetensors")
        name = EXPERTS.format(i=0) + "gate_up_proj_scales"
        save_file(w | {name: w[name][..., :1].contiguous()}, mx / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=match) as err:
        build(mx, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()
