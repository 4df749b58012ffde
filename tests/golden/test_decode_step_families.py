"""The one-call decode step (trtserve/kernels/decode_layers.c) runs the 2026 dense families' layers: Gemma 2
and 3 ((1 + w) sandwich norms, GeGLU, soft-capped scores, per-layer windows and local RoPE), SmolLM3 (NoPE
layers), Granite (residual, attention and logit multipliers) and Phi-3 (partial rotary, LongRoPE, a window),
and gives the op-by-op path's greedy tokens and log-probabilities bit for bit, alone and batched, with
prompts longer than the windows, in float32 and bfloat16 (the family goldens check both against HF)."""

from __future__ import annotations

import pytest
from family_goldens import make_model, step_outputs
from helpers import random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.kernels import decode_layers, dense

needs_kernel = pytest.mark.skipif(
    decode_layers.load() is None, reason="the decode kernel needs x86-64 with AVX2/FMA/F16C and a C compiler"
)
PARAMS = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=2)
WINDOW = 8  # prompts run to 70 tokens: windowed layers drop most keys
GEMMA = dict(
    head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW, num_hidden_layers=4, tie_word_embeddings=False
)
GEMMA3_ROPE = {  # the global layers' RoPE scaled, the local ones' by a base of their own
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
}
LONGROPE = dict(  # 8 of 16 dims rotate; prompts cross original_max_position_embeddings both ways
    partial_rotary_factor=0.5,
    original_max_position_embeddings=44,
    rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2, 1.7, 2.5], "long_factor": [1.0, 3.0, 9.0, 27.0]},
)
FAMILIES = {  # name: (transformers model_type, config overrides)
    "gemma2": ("gemma2", GEMMA),
    "gemma3": (
        "gemma3_text",
        dict(GEMMA, layer_types=["sliding_attention", "full_attention"] * 2, rope_parameters=GEMMA3_ROPE),
    ),
    "smollm3": ("smollm3", dict(num_hidden_layers=4, no_rope_layer_interval=2)),
    "granite": (
        "granite",
        dict(embedding_multiplier=12.0, attention_multiplier=0.09, residual_multiplier=0.22, logits_scaling=4.0),
    ),
    "phi3": ("phi3", dict(LONGROPE, sliding_window=16)),
}


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_decodes_in_the_step_as_op_by_op(tmp_path, monkeypatch, family, dtype):
    model_type, overrides = FAMILIES[family]
    src = make_model(tmp_path / "hf", model_type, seed=7, **overrides)
    build_engine(BuildConfig(model=str(src), tokens_per_block=8, dtype=dtype), tmp_path / "e", quiet=True)
    llm = LLM(tmp_path / "e", device="cpu", enable_prefix_caching=False)
    model = llm.engine.model
    assert model.step_weights is not None and model.use_pointwise
    batch = min(5, dense.max_rows(model.dtype), model.step_weights.max_rows)
    for prompts in (random_prompts(1, seed=3, lo=60, hi=70), random_prompts(batch, seed=4, lo=1, hi=70)):
        fused, ran = step_outputs(llm, prompts, PARAMS, True, monkeypatch)
        op_by_op, ran_off = step_outputs(llm, prompts, PARAMS, False, monkeypatch)
        assert ran >= PARAMS.max_tokens - 1 and ran_off == 0
        assert fused == op_by_op
