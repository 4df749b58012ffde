"""Gemma 3 text (sliding-window and global layers by `layer_types` or the older `sliding_window_pattern`,
the local layers' own RoPE base beside the global layers' scaled one, q/k per-head norms, (1 + weight)
sandwich norms, GeGLU, scaled embeddings, query_pre_attn_scalar) from safetensors and from GGUF: float32
greedy equals HF transformers token for token on prompts longer than the window; bad checkpoints are
refused."""

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

from trtserve import LLM
from trtserve.engine.errors import UserError

WINDOW = 8
LAYER_TYPES = ["sliding_attention", "full_attention"] * 2
# the global layers' RoPE scaled (linear, as Gemma 3 4B and up), the local ones' by a base of their own
ROPE = {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
}
GEMMA3 = dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW, num_hidden_layers=4)
GGUF_NAMES = {  # llama.cpp's names of Gemma's norms
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("gemma3") / "hf", "gemma3_text", seed=3, tie_word_embeddings=False,
                      layer_types=LAYER_TYPES, rope_parameters=ROPE, **GEMMA3)  # fmt: skip


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src):
    return build(src, tmp_path_factory.mktemp("gemma3-engine") / "e")


def test_the_engine_records_the_layers_windows_and_rope_bases(engine):
    cfg = read_json(engine / "config.json")["pretrained_config"]
    assert cfg["architecture"] == "Gemma3ForCausalLM"
    assert cfg["layer_windows"] == [WINDOW, None, WINDOW, None]
    assert (cfg["rotary_base"], cfg["rotary_base_local"]) == (1e6, 1e4)
    assert cfg["rotary_scaling"] == {"rope_type": "linear", "factor": 8.0}
    assert cfg["attn_logit_softcapping"] is None and cfg["final_logit_softcapping"] is None


def test_greedy_equals_hf(engine, src):
    assert_greedy_equals_hf(engine, src)


def test_logprobs_equal_hf(engine, src):
    assert_logprobs_equal_hf(engine, src)


def test_the_windows_matter(engine, src):
    assert_windows_matter(engine, src)


def test_speculative_greedy_equals_hf(engine, src):
    assert_speculative_greedy_equals_hf(engine, src)


def test_decode_runs_in_the_one_call_step(engine, monkeypatch):
    assert_decode_step_runs(engine, monkeypatch)


def test_the_older_sliding_window_pattern_greedy_equals_hf(tmp_path):
    # every third layer global, by the pattern key config.json files on the Hub still carry; tied embeddings
    m = make_model(
        tmp_path / "hf", "gemma3_text", seed=4, sliding_window_pattern=3, **GEMMA3 | {"num_hidden_layers": 3}
    )
    assert read_json(build(m, tmp_path / "e") / "config.json")["pretrained_config"]["layer_windows"] == [8, 8, None]
    prompts = random_prompts(4, seed=2, lo=20, hi=70)
    llm = LLM(tmp_path / "e", kv_cache_memory=16 << 20, max_num_tokens=16)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == greedy_of(hf_model(m), prompts, 24)


def test_gguf_greedy_equals_hf(tmp_path):
    # llama.cpp fixes five local layers to each global one, their base at 10000, and scales attention by
    # key_length ** -0.5: a checkpoint of six layers whose query_pre_attn_scalar is head_dim
    m = make_model(tmp_path / "hf", "gemma3_text", seed=6, tie_word_embeddings=False,
                   **GEMMA3 | {"num_hidden_layers": 6, "query_pre_attn_scalar": 16})  # fmt: skip
    gguf = write_gguf(m, tmp_path / "gemma3.gguf", "gemma3", permute=False, layer_names=GGUF_NAMES, norm_offset=1.0,
                      extra=lambda w: w.add_uint32("gemma3.attention.sliding_window", WINDOW))  # fmt: skip
    assert_gguf_greedy_equals_hf(gguf, m, tmp_path / "e")


def _edit(src, dest, config):
    shutil.copytree(src, dest)
    (dest / "config.json").write_text(json.dumps(read_json(src / "config.json") | config))
    return dest


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"rope_parameters": ROPE | {"sliding_attention": {"rope_type": "yarn", "factor": 2.0}}},
            "rope type 'yarn' on sliding-window layers is not supported",
        ),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention is an encoder"),
    ],
    ids=["local-rope-scaling", "bidirectional"],
)
def test_bad_checkpoints_are_refused_in_one_sentence(tmp_path, src, config, match):
    bad = _edit(src, tmp_path / "bad", config)
    with pytest.raises(UserError, match=match) as err:
        build(bad, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_a_missing_q_norm_is_refused(tmp_path, src):
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, tmp_path / "bad")
    w = load_file(src / "model.safetensors")
    save_file({k: v for k, v in w.items() if "q_norm" not in k}, tmp_path / "bad" / "model.safetensors")
    with pytest.raises(UserError, match="lacks 4 tensor.*q_norm.weight"):
        build(tmp_path / "bad", tmp_path / "e")
    assert not (tmp_path / "e").exists()
