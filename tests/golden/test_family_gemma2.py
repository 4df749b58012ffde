"""Gemma 2 (alternating sliding-window and global layers, (1 + weight) sandwich norms, GeGLU, scaled
embeddings, query_pre_attn_scalar, attention and final logit soft-capping) from safetensors and from GGUF:
float32 greedy equals HF transformers token for token on prompts longer than the window; bad checkpoints
are refused."""

from __future__ import annotations

import json
import shutil

import pytest
from family_goldens import (
    GREEDY,
    assert_decode_step_runs,
    assert_gguf_greedy_equals_hf,
    assert_greedy_equals_hf,
    assert_logprobs_equal_hf,
    assert_speculative_greedy_equals_hf,
    assert_windows_matter,
    build,
    hf_model,
    make_model,
    write_gguf,
)
from helpers import greedy_of, random_prompts, read_json
from safetensors.torch import load_file, save_file

from trtserve import LLM
from trtserve.build.inspect import summarize
from trtserve.engine.errors import UserError

WINDOW = 8  # the prompts run to 70 tokens: the local layers drop most keys
# head_dim 16 and a query_pre_attn_scalar of its own; untied: the output follows attention, not the token
GEMMA2 = dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW, num_hidden_layers=4)
GGUF_NAMES = {  # llama.cpp's names of Gemma's norms
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("gemma2") / "hf", "gemma2", seed=3, tie_word_embeddings=False, **GEMMA2)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("gemma2-engine") / "e")


def test_the_engine_records_the_layers_windows_and_softcaps(engine):
    cfg = read_json(engine / "config.json")["pretrained_config"]
    assert cfg["layer_windows"] == [WINDOW, None, WINDOW, None]
    assert (cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"]) == (50.0, 30.0)
    assert cfg["attention_multiplier"] == 24**-0.5 and cfg["hidden_act"] == "gelu_pytorch_tanh"


def test_inspect_shows_the_kv_cost_per_layer_kind(engine):
    info = summarize(engine)
    per_layer = 2 * 2 * 16 * 4  # K and V, 2 KV heads of 16, float32
    kinds = {f"window_{WINDOW} x2": 2 * per_layer, "global x2": 2 * per_layer}  # every layer keeps every block
    assert info["kv_bytes_per_token_by_layer_kind"] == kinds
    assert info["kv_bytes_full_length_by_layer_kind"] == {k: v * info["max_seq_len"] for k, v in kinds.items()}


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_the_windows_matter(engine, src):
    assert_windows_matter(engine, src)


def test_speculative_greedy_equals_hf(engine, src):
    assert_speculative_greedy_equals_hf(engine, src)


def test_deterministic_greedy_equals_hf(engine, src):
    prompts = random_prompts(3, seed=2, lo=20, hi=70)
    llm = LLM(engine, kv_cache_memory=16 << 20, deterministic=True)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == greedy_of(hf_model(src), prompts, 24)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_gguf_greedy_equals_hf(tmp_path):
    # llama.cpp scales attention by key_length ** -0.5: a checkpoint whose query_pre_attn_scalar is head_dim
    m = make_model(
        tmp_path / "hf", "gemma2", seed=6, tie_word_embeddings=False, **GEMMA2 | {"query_pre_attn_scalar": 16}
    )
    caps = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
    gguf = write_gguf(
        m, tmp_path / "gemma2.gguf", "gemma2", permute=False, floats=caps, layer_names=GGUF_NAMES, norm_offset=1.0,
        extra=lambda w: w.add_uint32("gemma2.attention.sliding_window", WINDOW),
    )  # fmt: skip
    assert_gguf_greedy_equals_hf(gguf, m, tmp_path / "e")


def _edit(src, dest, weights=None, config=None):
    """A copy of src with its tensors passed through `weights` and config.json updated by `config`."""
    shutil.copytree(src, dest)
    if weights:
        save_file(weights(load_file(src / "model.safetensors")), dest / "model.safetensors")
    if config:
        (dest / "config.json").write_text(json.dumps(read_json(src / "config.json") | config))
    return dest


NORM = "model.layers.1.post_feedforward_layernorm.weight"
LAYER_TYPES = ["sliding_attention", "full_attention", "chunked_attention", "full_attention"]


@pytest.mark.parametrize(
    ("weights", "config", "match"),
    [
        (lambda w: {k: v for k, v in w.items() if k != NORM}, None, f"lacks 1 tensor.*e.g. {NORM}"),
        (
            lambda w: {k.replace("pre_feedforward", "pre_mlp"): v for k, v in w.items()},
            None,
            "lacks 4 tensor.*pre_feedforward_layernorm.weight",
        ),
        (None, {"layer_types": LAYER_TYPES}, "layer type 'chunked_attention' is not supported"),
        (None, {"hidden_activation": "relu"}, "hidden_act 'relu' is not supported for gemma2"),
    ],
    ids=["missing-tensor", "misnamed-tensor", "unknown-layer-type", "unknown-activation"],
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
        (dict(backend="tensorrt"), "backend tensorrt does not build gemma2 models yet; use --backend torch"),
    ],
    ids=["backend"],
)
def test_unsupported_pairs_are_refused(tmp_path, src, settings, match):
    with pytest.raises(UserError, match=match):
        build(src, tmp_path / "e", **settings)
    assert not (tmp_path / "e").exists()
