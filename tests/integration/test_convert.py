"""The unified checkpoint: fact-sheet names, exact values, TP shards that reassemble."""

from __future__ import annotations

import pytest
import torch
from helpers import make_hf_model, read_json
from safetensors.torch import load_file

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError


def _build(src, out, **kw):
    build_engine(BuildConfig(model=str(src), **kw), out, quiet=True)
    return out


def test_checkpoint_names_and_values_match_the_fact_sheet(tmp_path):
    src = make_hf_model(tmp_path / "hf", "qwen2", num_key_value_heads=2)
    eng = _build(src, tmp_path / "e")
    hf = load_file(src / "model.safetensors")
    ck = load_file(eng / "checkpoint/rank0.safetensors")
    L = "transformer.layers.0."
    assert torch.equal(
        ck[L + "attention.qkv.weight"], torch.cat([hf[f"model.layers.0.self_attn.{x}_proj.weight"] for x in "qkv"])
    )
    assert torch.equal(
        ck[L + "attention.qkv.bias"], torch.cat([hf[f"model.layers.0.self_attn.{x}_proj.bias"] for x in "qkv"])
    )
    assert torch.equal(ck[L + "mlp.fc.weight"], hf["model.layers.0.mlp.gate_proj.weight"])
    assert torch.equal(ck[L + "mlp.gate.weight"], hf["model.layers.0.mlp.up_proj.weight"])
    assert torch.equal(ck[L + "mlp.proj.weight"], hf["model.layers.0.mlp.down_proj.weight"])
    assert torch.equal(ck[L + "attention.dense.weight"], hf["model.layers.0.self_attn.o_proj.weight"])
    assert torch.equal(ck["transformer.vocab_embedding.weight"], hf["model.embed_tokens.weight"])
    assert torch.equal(ck["transformer.ln_f.weight"], hf["model.norm.weight"])
    assert torch.equal(ck["lm_head.weight"], hf["lm_head.weight"])
    per_layer = {
        "input_layernorm.weight",
        "post_layernorm.weight",
        "attention.qkv.weight",
        "attention.qkv.bias",
        "attention.dense.weight",
        "mlp.fc.weight",
        "mlp.gate.weight",
        "mlp.proj.weight",
    }
    expected = {"transformer.vocab_embedding.weight", "transformer.ln_f.weight", "lm_head.weight"}
    expected |= {f"transformer.layers.{i}.{n}" for i in range(2) for n in per_layer}
    assert set(ck) == expected
    cfg = read_json(eng / "checkpoint/config.json")
    assert cfg["architecture"] == "Qwen2ForCausalLM" and cfg["attn_bias"] is True
    assert cfg["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1}
    assert cfg["quantization"] == {"quant_algo": None, "kv_cache_quant_algo": None}
    engine_cfg = read_json(eng / "config.json")
    assert set(engine_cfg) == {"version", "pretrained_config", "build_config"}
    assert engine_cfg["build_config"]["plugin_config"]["tokens_per_block"] == 32
    # the torch engine's weights: fc and gate fused, nothing else changed
    w = load_file(eng / "model.safetensors")
    assert torch.equal(w[L + "mlp.fc_gate.weight"], torch.cat([ck[L + "mlp.fc.weight"], ck[L + "mlp.gate.weight"]]))


def test_dtype_cast_and_tied_lm_head(tmp_path):
    src = make_hf_model(tmp_path / "hf", "llama", tie_word_embeddings=True)
    eng = _build(src, tmp_path / "e", dtype="bfloat16")
    hf = load_file(src / "model.safetensors")
    ck = load_file(eng / "checkpoint/rank0.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in ck.values())
    assert torch.equal(ck["lm_head.weight"], hf["model.embed_tokens.weight"].bfloat16())
    assert "lm_head.weight" not in load_file(eng / "model.safetensors")  # the engine ties it at load


@pytest.mark.parametrize("tp,kv", [(2, 2), (4, 2), (4, 1), (2, 4)])
def test_tp_shards_reassemble(tmp_path, tp, kv):
    heads, hd = 4, 16
    src = make_hf_model(tmp_path / "hf", "qwen2", num_key_value_heads=kv, vocab_size=321)
    eng = _build(src, tmp_path / "e", tp_size=tp)
    hf = load_file(src / "model.safetensors")
    ranks = [load_file(eng / f"checkpoint/rank{r}.safetensors") for r in range(tp)]
    assert read_json(eng / "checkpoint/config.json")["mapping"]["tp_size"] == tp
    for i in range(2):
        L, H = f"transformer.layers.{i}.", f"model.layers.{i}."
        kv_local = max(kv // tp, 1)
        for name in ("weight", "bias"):
            q_parts, k_parts, v_parts = [], [], []
            for r in range(tp):
                q, k, v = ranks[r][L + f"attention.qkv.{name}"].split([heads // tp * hd, kv_local * hd, kv_local * hd])
                q_parts.append(q)
                k_parts.append(k)
                v_parts.append(v)
            assert torch.equal(torch.cat(q_parts), hf[H + f"self_attn.q_proj.{name}"])
            for parts, proj in ((k_parts, "k_proj"), (v_parts, "v_proj")):
                full = hf[H + f"self_attn.{proj}.{name}"]
                if kv >= tp:
                    assert torch.equal(torch.cat(parts), full)
                else:  # fewer KV heads than ranks: rank r holds a copy of head r * kv // tp
                    for r, part in enumerate(parts):
                        head = r * kv // tp
                        assert torch.equal(part, full[head * hd : (head + 1) * hd])
        assert torch.equal(
            torch.cat([rk[L + "attention.dense.weight"] for rk in ranks], 1), hf[H + "self_attn.o_proj.weight"]
        )
        assert torch.equal(torch.cat([rk[L + "mlp.fc.weight"] for rk in ranks]), hf[H + "mlp.gate_proj.weight"])
        assert torch.equal(torch.cat([rk[L + "mlp.gate.weight"] for rk in ranks]), hf[H + "mlp.up_proj.weight"])
        assert torch.equal(torch.cat([rk[L + "mlp.proj.weight"] for rk in ranks], 1), hf[H + "mlp.down_proj.weight"])
        for rk in ranks:
            assert torch.equal(rk[L + "input_layernorm.weight"], hf[H + "input_layernorm.weight"])
    lm = torch.cat([rk["lm_head.weight"] for rk in ranks])
    assert lm.shape[0] % tp == 0 and lm.shape[0] >= 321  # vocab padded to a multiple of tp
    assert torch.equal(lm[:321], hf["lm_head.weight"]) and not lm[321:].any()
    for rk in ranks:
        assert torch.equal(rk["transformer.vocab_embedding.weight"], hf["model.embed_tokens.weight"])


def test_tp_size_that_does_not_divide_heads_is_refused(tmp_path):
    src = make_hf_model(tmp_path / "hf", "llama")
    with pytest.raises(UserError, match="--tp-size 3 does not divide num_attention_heads 4"):
        _build(src, tmp_path / "e", tp_size=3)
    assert not (tmp_path / "e").exists()


def test_unused_source_tensor_is_refused(tmp_path):
    from safetensors.torch import save_file

    src = make_hf_model(tmp_path / "hf", "llama")
    sd = load_file(src / "model.safetensors")
    sd["model.layers.0.self_attn.extra.weight"] = torch.zeros(2)
    save_file(sd, src / "model.safetensors")
    with pytest.raises(UserError, match="does not use, e.g. model.layers.0.self_attn.extra.weight"):
        _build(src, tmp_path / "e")


def test_mlp_biases_follow_their_linears(tmp_path):
    src = make_hf_model(tmp_path / "hf", "llama", mlp_bias=True)
    eng = _build(src, tmp_path / "e", tp_size=2)
    hf = load_file(src / "model.safetensors")
    ranks = [load_file(eng / f"checkpoint/rank{r}.safetensors") for r in range(2)]
    L, H = "transformer.layers.1.", "model.layers.1."
    assert torch.equal(torch.cat([rk[L + "mlp.fc.bias"] for rk in ranks]), hf[H + "mlp.gate_proj.bias"])
    assert torch.equal(torch.cat([rk[L + "mlp.gate.bias"] for rk in ranks]), hf[H + "mlp.up_proj.bias"])
    assert all(torch.equal(rk[L + "mlp.proj.bias"], hf[H + "mlp.down_proj.bias"]) for rk in ranks)  # row parallel
    w = load_file(eng / "model.safetensors")
    fused = torch.cat([hf[H + "mlp.gate_proj.bias"], hf[H + "mlp.up_proj.bias"]])
    assert torch.equal(w[L + "mlp.fc_gate.bias"], fused) and L + "mlp.fc.bias" not in w
