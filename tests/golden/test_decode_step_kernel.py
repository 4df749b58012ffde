"""The whole-step decode kernel (trtserve/kernels/decode_layers.c) gives the same greedy tokens and
the same log-probabilities, bit for bit, as the decoder's op-by-op path it replaces, in every
dtype, with GQA, qkv biases, q/k norms, W8A16 int8 and W4A16 int4 weights, alone and batched; and steps it
cannot take go op by op."""

from __future__ import annotations

import pytest
import torch
from family_goldens import make_model, step_outputs
from helpers import make_hf_model, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.kernels import decode_layers, dense, native
from trtserve.kernels import int4 as int4_kernel

needs_kernel = pytest.mark.skipif(
    decode_layers.load() is None, reason="the decode kernel needs x86-64 with AVX2/FMA/F16C and a C compiler"
)
PARAMS = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=2)
# int4 groups of 64 inputs: a group size the builder offers that divides the tiny model's hidden
# size (64) and, with intermediate_size 128, every linear's inputs
INT4 = {"intermediate_size": 128}


def llm_dtype(engine) -> torch.dtype:
    from trtserve.engine.layout import read_engine_config

    return getattr(torch, read_engine_config(engine).pretrained_config.dtype)


@needs_kernel
@pytest.mark.parametrize(
    ("arch", "dtype", "quant", "overrides"),
    [
        ("llama", torch.float32, None, {}),
        ("llama", torch.bfloat16, None, {"num_key_value_heads": 1}),
        ("llama", torch.float16, None, {}),
        ("qwen2", torch.float32, None, {"num_key_value_heads": 4}),
        ("llama", torch.float32, "w8a16", {}),  # int8 weights: the per-op path runs our int8 GEMV too
        ("llama", torch.bfloat16, "w8a16", {}),
        ("llama", torch.float32, "w4a16", INT4),  # int4: the per-op path runs int4_gemm.c, as the step
        ("llama", torch.bfloat16, "w4a16", INT4),
        ("llama", torch.bfloat16, "w4a16", {**INT4, "int8_activations": True}),  # RuntimeConfig's opt-in
        ("llama", torch.float32, "w4a16", {**INT4, "int8_activations": True}),
        # a float32 model's 16-bit cache (RuntimeConfig's kv_cache_dtype): written rounded, read widened
        ("llama", torch.float32, None, {"num_key_value_heads": 2, "kv_cache_dtype": "float16"}),
        ("qwen2", torch.float32, None, {"kv_cache_dtype": "bfloat16"}),
        ("llama", torch.float32, "w4a16", {**INT4, "kv_cache_dtype": "float16"}),
    ],
)
def test_step_kernel_equals_op_by_op(tmp_path, monkeypatch, arch, dtype, quant, overrides):
    overrides = dict(overrides)
    int8_act = overrides.pop("int8_activations", False)
    kv_dtype = overrides.pop("kv_cache_dtype", "auto")
    if int8_act and not int4_kernel.int8_activations_available():
        pytest.skip("int8 activations need the kernels' AVX-512 build with VNNI and VBMI")
    src = make_hf_model(tmp_path / "hf", arch, seed=7, dtype=dtype, **overrides)
    out = tmp_path / "engine"
    # quantized engines are built in bfloat16 unless asked
    extra = {"dtype": str(dtype).removeprefix("torch.")} if quant else {}
    extra |= {"group_size": 64} if quant == "w4a16" else {}
    build_engine(BuildConfig(model=str(src), tokens_per_block=8, quant=quant, **extra), out, quiet=True)
    assert llm_dtype(out) == dtype
    # CPU kernels; both runs compute every prompt token alike
    llm = LLM(out, device="cpu", enable_prefix_caching=False, int8_activations=int8_act, kv_cache_dtype=kv_dtype)
    assert llm.core.runner.kv.data.dtype == (dtype if kv_dtype == "auto" else getattr(torch, kv_dtype))
    if int8_act:
        assert all(layer.qkv.int8_activations for layer in llm.engine.model.layers)
    if quant == "w4a16" and not llm.engine.model.layers[0].qkv.ours(dtype, 1):
        pytest.skip("the per-op path runs torch's int4 kernel here (bf16 on an AVX-512 build of torch)")
    _assert_step_equals_op_by_op(llm, monkeypatch)


def _assert_step_equals_op_by_op(llm: LLM, monkeypatch, batch: int = 5) -> None:
    assert llm.engine.model.step_weights is not None
    # 2-4 in bf16 where torch's native bf16 GEMM takes over; int4 in bf16 2 against torch's AVX-512 kernel
    batch = min(batch, dense.max_rows(llm.engine.model.dtype), llm.engine.model.step_weights.max_rows)
    for prompts in (random_prompts(1, seed=3), random_prompts(batch, seed=4, lo=1, hi=40)):  # alone, batched
        fused, ran = step_outputs(llm, prompts, PARAMS, True, monkeypatch)
        op_by_op, ran_off = step_outputs(llm, prompts, PARAMS, False, monkeypatch)
        assert ran >= PARAMS.max_tokens - 1 and ran_off == 0
        assert fused == op_by_op


QK = dict(head_dim=32, num_key_value_heads=1)  # q_size 128 != hidden 64


@needs_kernel
@pytest.mark.skipif(not native.amx_bf16(), reason="AMX's bf16 GEMM (amx.h) is built only where the CPU has AMX")
@pytest.mark.parametrize("batch", [9, 20, 40])  # one, two and three 16-row tiles of x
def test_bf16_steps_of_many_rows_run_amx_in_the_step_as_op_by_op(tmp_path, monkeypatch, batch):
    """From amx.h's fewest rows, a bf16 step's GEMMs are AMX tile multiplies, in the one-call step and in the
    per-op linears alike: the two give the same bits."""
    src = make_hf_model(tmp_path / "hf", "llama", seed=7, dtype=torch.bfloat16)
    build_engine(BuildConfig(model=str(src), tokens_per_block=8), tmp_path / "engine", quiet=True)
    llm = LLM(tmp_path / "engine", device="cpu", enable_prefix_caching=False, kv_cache_memory=32 << 20)
    assert dense.max_rows(torch.bfloat16) >= batch > dense.same_bits_rows(torch.bfloat16)
    _assert_step_equals_op_by_op(llm, monkeypatch, batch)


@needs_kernel
@pytest.mark.parametrize(
    ("model_type", "dtype", "overrides"),
    [
        ("qwen3", "float32", QK),  # q and k normed per head (features.QK_NORM)
        ("qwen3", "bfloat16", QK),
        ("qwen3_moe", "float32", {**QK, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 48}),
        ("olmoe", "float32", {"num_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32}),  # over all heads
    ],
)
def test_q_and_k_norms_in_the_step_equal_op_by_op(tmp_path, monkeypatch, model_type, dtype, overrides):
    """The step's q/k RMSNorm (per head or over all heads) gives the op-by-op path's bits: that path runs the
    same norm in the pointwise kernels."""
    src = make_model(tmp_path / "hf", model_type, seed=7, **overrides)
    build_engine(BuildConfig(model=str(src), tokens_per_block=8, dtype=dtype), tmp_path / "e", quiet=True)
    llm = LLM(tmp_path / "e", device="cpu", enable_prefix_caching=False)
    assert llm.engine.model.layers[0].q_norm is not None and llm.engine.model.use_pointwise
    _assert_step_equals_op_by_op(llm, monkeypatch)


def test_int8_activations_are_refused_where_they_cannot_apply(tmp_path, monkeypatch, tiny_llama_engine):
    with pytest.raises(UserError, match="int8_activations applies to engines with int4 group-wise weights"):
        LLM(tiny_llama_engine, device="cpu", int8_activations=True)  # a float engine
    src = make_hf_model(tmp_path / "hf", "llama", seed=7, dtype=torch.bfloat16, **INT4)
    build_engine(
        BuildConfig(model=str(src), tokens_per_block=8, quant="w4a16", group_size=64), tmp_path / "e", quiet=True
    )
    monkeypatch.setattr(int4_kernel, "int8_activations_available", lambda: False)  # a CPU without VNNI / VBMI
    with pytest.raises(UserError, match="needs the CPU kernels' AVX-512 build with VNNI and VBMI"):
        LLM(tmp_path / "e", device="cpu", int8_activations=True)


def test_deterministic_models_and_mismatched_weights_take_the_op_path(tiny_llama_engine):
    assert LLM(tiny_llama_engine, device="cpu", deterministic=True).engine.model.step_weights is None
    model = LLM(tiny_llama_engine, device="cpu").engine.model
    cfg, layers = model.cfg, model.layers
    hidden, inter = cfg.hidden_size, cfg.intermediate_size
    width = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_size
    shapes = {
        "qkv": (width, hidden),
        "dense": (hidden, hidden),
        "fc_gate": (2 * inter, hidden),
        "proj": (hidden, inter),
    }
    step = model.step_weights.step
    assert decode_layers.pack(layers, layers[0].qkv.dtype, shapes, step) is not None
    assert decode_layers.pack(layers, torch.float16, shapes, step) is None  # weights in another dtype than asked
    assert decode_layers.pack(layers, layers[0].qkv.dtype, {**shapes, "proj": (hidden, inter + 8)}, step) is None


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_verification_rows_run_in_the_step_and_equal_plain_decode_bit_for_bit(tmp_path, monkeypatch, dtype):
    """A sequence verifying proposals runs a row per token in the one-call step; each row computes what a
    plain decode step computes at its position, so greedy tokens and logprobs are the plain engine's bits,
    on every kernel path (run it under each TRTSERVE_ISA cap: scripts/isa_lanes.sh). Bit-exact because
    the dense GEMM sums a row in one order whatever the rows (gemv.h's tiles are per row, in both builds),
    and because a step stays within dense.same_bits_rows,
    where the lm_head runs that kernel: past max_rows torch's GEMM runs, and on AMX bf16 from 8 rows
    amx.h's tiles, whose bits differ. That limit is 2-7 rows in bf16 where the CPU has bf16 matmul (AMD's
    AVX-512 path 2, AMX 7), so a verification there is of at most limit - 1 proposals."""
    limit = dense.same_bits_rows(dtype)
    proposals = min(3, limit - 1)  # a verification is proposals + 1 rows
    src = make_hf_model(tmp_path / "hf", "llama", seed=11, dtype=dtype)
    build_engine(BuildConfig(model=str(src), tokens_per_block=8), tmp_path / "e", quiet=True)
    ngram = {"method": "ngram", "num_speculative_tokens": proposals, "max_batch_size": 8}
    plain = LLM(tmp_path / "e", device="cpu", kv_cache_memory=8 << 20)
    spec = LLM(tmp_path / "e", device="cpu", kv_cache_memory=8 << 20, speculative=ngram)
    if spec.engine.model.step_weights is None:
        pytest.skip("no step kernel for this dtype here")
    rows_past_one = 0
    real_run = decode_layers.run

    def counting_run(packed, h, kv_data, *args, **kwargs):
        nonlocal rows_past_one
        ok = real_run(packed, h, kv_data, *args, **kwargs)
        rows_past_one += ok and h.shape[0] > torch.unique(args[7], dim=0).shape[0]  # more rows than block tables
        return ok

    monkeypatch.setattr(decode_layers, "run", counting_run)
    prompts = [[5, 6, 7, 8, 9] * 5, [11, 12, 13] * 8, [40, 41] * 10][: min(3, limit // (proposals + 1))]
    want, got = plain.generate(prompts, PARAMS), spec.generate(prompts, PARAMS)
    assert spec.core.stats().spec.accepted_tokens > 0 and rows_past_one > 0
    for w, g in zip(want, got, strict=True):
        a, b = w.outputs[0], g.outputs[0]
        assert a.token_ids == b.token_ids
        assert [(lp.logprob, lp.top) for lp in a.logprobs] == [(lp.logprob, lp.top) for lp in b.logprobs]
