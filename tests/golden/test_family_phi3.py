"""Phi-3 / Phi-4-mini (fused qkv_proj and gate_up_proj split by the converter, partial rotary, LongRoPE)
from safetensors and from GGUF: float32 greedy equals HF transformers token for token, with prompts on
both sides of LongRoPE's switch to its long factors; bad checkpoints are refused in one sentence."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from family_goldens import (
    GREEDY,
    NEW_TOKENS,
    assert_decode_step_runs,
    assert_gguf_greedy_equals_hf,
    assert_greedy_equals_hf,
    assert_logprobs_equal_hf,
    build,
    hf_model,
    make_model,
    write_gguf,
)
from helpers import greedy_of, random_prompts, read_json
from safetensors.torch import load_file, save_file

from trtserve import LLM
from trtserve.engine.errors import UserError

# original_max_position_embeddings. HF's Phi-3 drops its KV cache and recomputes the whole sequence with the
# long factors when a generation crosses it; trtserve keeps the keys it has (docs/building.md), so the
# goldens' prompts stay on one side: longer than it, or short enough that 24 tokens more do not reach it.
ORIGINAL = 44
LONGROPE = dict(
    partial_rotary_factor=0.5,  # 8 of each head's 16 dims rotate: 4 factors
    original_max_position_embeddings=ORIGINAL,
    rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2, 1.7, 2.5], "long_factor": [1.0, 3.0, 9.0, 27.0]},
)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("phi3") / "hf", "phi3", seed=5, **LONGROPE)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("phi3-engine") / "e")


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_longrope_picks_its_factors_by_length_as_hf_does(engine, src):
    """A prompt past the original length takes the long factors from its first token; a shorter one takes
    the short ones until the sequence reaches past it. Each on both sides, and the factors matter."""
    prompts = [p for n in (5, 15, 21, 45, 50, 60) for p in random_prompts(1, seed=n, lo=n, hi=n + 1)]
    expected = greedy_of(hf_model(src), prompts, 24)
    llm = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=16)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == expected
    assert llm.engine.model.rope.long_from == ORIGINAL
    short_only = make_model(src.parent / "short", "phi3", seed=5, partial_rotary_factor=0.5)
    assert greedy_of(hf_model(short_only), prompts, 24) != expected  # the long factors changed the tokens


def test_a_long_prompt_never_reuses_blocks_cached_under_the_short_factors(engine, src):
    """A 16-token prompt (40 tokens with its output: short factors throughout) caches a block under the
    short factors; a 50-token prompt that starts with it runs on the long ones from its first token, so it
    must compute that block again (and equal HF), while a second long prompt reuses the first one's."""
    short = random_prompts(1, seed=7, lo=16, hi=17)[0]
    long = short + random_prompts(1, seed=8, lo=34, hi=35)[0]
    expected = greedy_of(hf_model(src), [short, long], NEW_TOKENS)
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=True)
    assert llm.generate([short], GREEDY)[0].token_ids == expected[0]
    first = llm.generate([long], GREEDY)[0]
    assert (first.token_ids, first.num_cached_tokens) == (expected[1], 0)
    again = llm.generate([long], GREEDY)[0]
    assert again.token_ids == expected[1] and again.num_cached_tokens > 0


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_the_fused_tensors_are_split_each_row_used_once(engine, src):
    """The converter splits qkv_proj into q, k, v and gate_up_proj into gate (activated) and up; the
    engine's weights are those rows, fused again as its GEMMs take them."""
    hf, ours = load_file(src / "model.safetensors"), load_file(engine / "model.safetensors")
    assert (ours["transformer.layers.1.attention.qkv.weight"] == hf["model.layers.1.self_attn.qkv_proj.weight"]).all()
    assert (ours["transformer.layers.1.mlp.fc_gate.weight"] == hf["model.layers.1.mlp.gate_up_proj.weight"]).all()
    ckpt = load_file(engine / "checkpoint" / "rank0.safetensors")
    gate, up = hf["model.layers.0.mlp.gate_up_proj.weight"].chunk(2)
    assert (ckpt["transformer.layers.0.mlp.fc.weight"] == gate).all()
    assert (ckpt["transformer.layers.0.mlp.gate.weight"] == up).all()


def test_plain_rope_and_tied_embeddings_greedy_equal_hf(tmp_path):
    """Phi-4-mini's shape: partial rotary without LongRoPE, the lm_head tied to the embedding."""
    plain = make_model(tmp_path / "hf", "phi3", seed=6, partial_rotary_factor=0.75, tie_word_embeddings=True)
    assert_greedy_equals_hf(build(plain, tmp_path / "e"), plain, seed=2)


def _longrope_metadata(cfg):
    """What llama.cpp's Phi3MiniModel writes beyond the shared keys: the rotated dims, the original
    context, and LongRoPE's factors as two float32 tensors."""

    def extra(w):
        rope = cfg["rope_parameters"]
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(int(head_dim * rope["partial_rotary_factor"]))
        w.add_uint32("phi3.rope.scaling.original_context_length", cfg["original_max_position_embeddings"])
        w.add_uint32("phi3.attention.sliding_window", 0)
        for which in ("long", "short"):
            w.add_tensor(f"rope_factors_{which}.weight", np.asarray(rope[f"{which}_factor"], dtype=np.float32))

    return extra


def test_gguf_greedy_equals_hf(tmp_path, src):
    extra = _longrope_metadata(read_json(src / "config.json"))
    gguf = write_gguf(src, tmp_path / "phi3.gguf", "phi3", permute=False, extra=extra)
    prompts = [p for n in (9, 21, 45, 63) for p in random_prompts(1, seed=n, lo=n, hi=n + 1)]  # both sides
    llm = LLM(build(gguf, tmp_path / "e"), kv_cache_memory=16 << 20)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == greedy_of(hf_model(src), prompts, 24)


def test_plain_gguf_greedy_equals_hf(tmp_path):
    """A Phi-4-mini-shaped GGUF (partial rotary from rope.dimension_count, no LongRoPE tensors)."""
    plain = make_model(tmp_path / "hf", "phi3", seed=7, partial_rotary_factor=0.75)
    extra = lambda w: w.add_rope_dimension_count(12)  # noqa: E731
    gguf = write_gguf(plain, tmp_path / "phi3.gguf", "phi3", permute=False, extra=extra)
    assert_gguf_greedy_equals_hf(gguf, plain, tmp_path / "e")


def _edit(src, dest, weights=None, config=None):
    """A copy of src with its tensors passed through `weights` and config.json updated by `config`."""
    shutil.copytree(src, dest)
    if weights:
        save_file(weights(load_file(src / "model.safetensors")), dest / "model.safetensors")
    if config:
        (dest / "config.json").write_text(json.dumps(read_json(src / "config.json") | config))
    return dest


QKV = "model.layers.1.self_attn.qkv_proj.weight"


def _split_qkv(w):
    """q, k and v stored apart under Llama's names, as a Phi-3 checkpoint never is."""
    w = dict(w)
    q, k, v = w.pop(QKV).split([64, 32, 32])
    return w | {QKV.replace("qkv", x): t for x, t in zip("qkv", (q, k, v), strict=True)}


@pytest.mark.parametrize(
    ("weights", "config", "match"),
    [
        (lambda w: {k: v for k, v in w.items() if k != QKV}, None, f"lacks 1 tensor.*e.g. {QKV}"),
        (_split_qkv, None, f"lacks 1 tensor.*e.g. {QKV}"),
        (lambda w: w | {QKV: w[QKV][:-16]}, None, rf"{QKV} has shape \[112, 64\] but config.json implies \[128, 64\]"),
        (
            None,
            {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
            r"type field must be one of \['longrope'\], got dynamic",
        ),
    ],
    ids=["missing-fused-tensor", "unfused-tensors", "short-fused-tensor", "unknown-rope"],
)
def test_bad_checkpoints_are_refused_in_one_sentence(tmp_path, src, weights, config, match):
    bad = _edit(src, tmp_path / "bad", weights, config)
    with pytest.raises(UserError, match=match) as err:
        build(bad, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_longrope_on_a_family_without_it_is_refused(tmp_path):
    """LongRoPE is a feature of the family table: Llama does not declare it, so it is refused by name."""
    longrope = {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
    bad = make_model(tmp_path / "hf", "llama", seed=1, rope_scaling=longrope, original_max_position_embeddings=48)
    with pytest.raises(UserError, match=r"llama with rope_parameters=.* is not supported \(long_rope\)"):
        build(bad, tmp_path / "e")


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        (dict(backend="tensorrt"), "backend tensorrt does not build phi3 models yet; use --backend torch"),
    ],
    ids=["backend"],
)
def test_unsupported_pairs_are_refused(tmp_path, src, settings, match):
    with pytest.raises(UserError, match=match):
        build(src, tmp_path / "e", **settings)
    assert not (tmp_path / "e").exists()
