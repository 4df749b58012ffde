"""gpt-oss from llama.cpp's `gpt-oss` GGUF, written here as its converter (conversion/gpt_oss.py) writes a
released MXFP4 checkpoint: gate and up split from HF's interleaved gate_up_proj, each expert weight kept as
ggml's MXFP4 blocks (nibbles re-ordered, the scale byte first), the MLP's norm as post_attention_norm.
The GGUF engine's weights equal the safetensors build's of the same checkpoint bit for bit, its float32
greedy output equals HF transformers', and bad files are refused in one sentence, leaving nothing."""

from __future__ import annotations

import shutil

import gguf
import numpy as np
import pytest
import torch
from family_goldens import GREEDY, NEW_TOKENS, build, make_model, write_gguf
from helpers import greedy_of, random_prompts, read_json
from safetensors.torch import load_file, save_file
from test_family_gpt_oss import EXPERTS, GPT_OSS, _mxfp4_checkpoint, _with_random_biases

from trtserve import LLM
from trtserve.build.gguf_reader import GGUFReader
from trtserve.engine.errors import UserError

# llama.cpp's graph fixes the SwiGLU limit at 7 (the released checkpoints' value): the checkpoint uses it too
CONFIG = GPT_OSS | dict(swiglu_limit=7.0)
# HF module -> llama.cpp's name where gpt-oss's differ from family_goldens' table
LAYER_NAMES = {
    "post_attention_layernorm": "post_attention_norm",
    "self_attn.sinks": "attn_sinks",
    "mlp.router": "ffn_gate_inp",
}
PROJS = {"gate_up_proj": ("ffn_gate_exps", "ffn_up_exps"), "down_proj": ("ffn_down_exps",)}


@pytest.fixture(scope="module")
def mx(tmp_path_factory):
    """A released-style checkpoint: random biases, experts as MXFP4 blocks and scales."""
    root = tmp_path_factory.mktemp("gpt-oss-gguf")
    src = _with_random_biases(make_model(root / "hf", "gpt_oss", seed=3, **CONFIG))
    return _mxfp4_checkpoint(src, root / "mx")


def _ggml_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> np.ndarray:
    """HF's MXFP4 (..., out, G, 16) blocks (value 2j low nibble of byte j, 2j + 1 high) and (..., out, G) scales
    as ggml's block_mxfp4 rows (..., out, G * 17): the scale byte, then value k in byte k's low nibble and
    k + 16 in its high one (the converter's transform_nibble_layout and repack_mxfp4)."""
    codes = torch.stack([blocks & 0x0F, blocks >> 4], dim=-1).flatten(-2)  # (..., out, G, 32) in value order
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return torch.cat([scales[..., None], qs], dim=-1).flatten(-2).numpy()


def _experts(cfg: dict, experts: int | None = None, corrupt: str | None = None):
    """write_gguf's `extra`: the metadata llama.cpp's GptOssModel writes beyond the shared keys, and each
    layer's experts as MXFP4; experts: a different expert_count; corrupt: a tensor whose shape claims one more
    expert than its bytes hold."""

    def extra(w: gguf.GGUFWriter, stored: dict[str, torch.Tensor]) -> None:
        rope = cfg["rope_parameters"]
        w.add_expert_count(experts or cfg["num_local_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
        w.add_sliding_window(cfg["sliding_window"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
        for i in range(cfg["num_hidden_layers"]):
            for proj, names in PROJS.items():
                blocks, scales = (
                    stored[EXPERTS.format(i=i) + proj + "_blocks"],
                    stored[EXPERTS.format(i=i) + proj + "_scales"],
                )
                for part, name in enumerate(names):  # gate: rows 0::2 of gate_up, up: 1::2
                    rows = slice(part, None, len(names))
                    data = _ggml_mxfp4(blocks[:, rows], scales[:, rows])
                    full = f"blk.{i}.{name}.weight"
                    shape = (data.shape[0] + 1, *data.shape[1:]) if full == corrupt else None
                    w.add_tensor(full, data, raw_shape=shape, raw_dtype=gguf.GGMLQuantizationType.MXFP4)

    return extra


def write_gpt_oss_gguf(mx, dest, **bad):
    """The GGUF llama.cpp's converter writes from the MXFP4 checkpoint at mx: the float tensors through
    write_gguf (sinks as `.weight`, the experts' biases split as gate_up_proj), the experts by _experts."""
    stage = dest.parent / (dest.stem + "-stage")
    shutil.copytree(mx, stage)
    stored = load_file(mx / "model.safetensors")
    plain = {}
    for name, t in stored.items():
        if name.endswith(("_blocks", "_scales")):
            continue
        if name.endswith("self_attn.sinks"):
            name += ".weight"
        if name.endswith("gate_up_proj_bias"):
            base = name[: -len("gate_up_proj_bias")]
            plain |= {base + "gate_proj.bias": t[..., 0::2], base + "up_proj.bias": t[..., 1::2]}
            continue
        plain[name.replace("down_proj_bias", "down_proj.bias")] = t
    save_file({k: v.contiguous() for k, v in plain.items()}, stage / "model.safetensors")
    extra = _experts(read_json(mx / "config.json"), **bad)
    return write_gguf(stage, dest, "gpt-oss", permute=False, extra=lambda w: extra(w, stored), layer_names=LAYER_NAMES)


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory, mx):
    return write_gpt_oss_gguf(mx, tmp_path_factory.mktemp("gguf") / "gpt-oss.gguf")


def test_the_written_blocks_are_ggml_mxfp4(mx, gguf_file):
    """gguf-py's own MXFP4 dequantizer reads the written experts as transformers reads the checkpoint's: the
    test writes ggml's layout, not one of its own."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    stored, reader = load_file(mx / "model.safetensors"), gguf.GGUFReader(gguf_file)
    tensors = {t.name: t for t in reader.tensors}
    gate_up = convert_moe_packed_tensors(
        stored[EXPERTS.format(i=1) + "gate_up_proj_blocks"], stored[EXPERTS.format(i=1) + "gate_up_proj_scales"]
    )
    up = tensors["blk.1.ffn_up_exps.weight"]
    assert up.tensor_type == gguf.GGMLQuantizationType.MXFP4
    got = gguf.quants.dequantize(np.asarray(up.data), up.tensor_type).reshape(16, 32, 64)
    assert torch.equal(torch.from_numpy(got).to(torch.bfloat16), gate_up[..., 1::2].transpose(1, 2))


def test_engine_weights_equal_the_safetensors_build(tmp_path, mx, gguf_file):
    """--dtype auto reads the MXFP4 GGUF as bfloat16, which holds every MXFP4 value: each engine tensor,
    the experts' included, equals the MXFP4 safetensors build's bit for bit, and so does the model config (the norm's epsilon as float32 rounds it)."""
    reader = GGUFReader(gguf_file)
    assert reader.auto_dtype == "bfloat16" and reader.family.name == "gpt_oss"
    assert reader.load(EXPERTS.format(i=0) + "gate_proj.weight").dtype == torch.bfloat16
    ours = build(gguf_file, tmp_path / "gguf")
    ref = build(mx, tmp_path / "hf", dtype="bfloat16")
    got, want = load_file(ours / "model.safetensors"), load_file(ref / "model.safetensors")
    assert got.keys() == want.keys() and any(".experts." in k for k in got)
    assert all(torch.equal(got[k], want[k]) for k in want), [k for k in want if not torch.equal(got[k], want[k])]
    cfg, ref_cfg = (read_json(e / "config.json")["pretrained_config"] for e in (ours, ref))
    assert cfg.pop("norm_epsilon") == pytest.approx(ref_cfg.pop("norm_epsilon"), rel=1e-7)  # GGUF's float32
    assert cfg == ref_cfg


def test_float32_greedy_equals_hf(tmp_path, mx, gguf_file):
    from transformers import AutoModelForCausalLM, Mxfp4Config

    hf = AutoModelForCausalLM.from_pretrained(mx, dtype=torch.float32, quantization_config=Mxfp4Config(dequantize=True))
    prompts = random_prompts(4, seed=4, lo=1, hi=70)
    expected = greedy_of(hf.eval(), prompts, NEW_TOKENS)
    llm = LLM(build(gguf_file, tmp_path / "e", dtype="float32"), kv_cache_memory=16 << 20)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == expected


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            dict(corrupt="blk.0.ffn_down_exps.weight"),
            r"tensor blk\.0\.ffn_down_exps\.weight's shape \[17, 64, 32\] of MXFP4 needs .* bytes, which run into",
        ),
        (dict(experts=8), r"has shape \[16, .*\] but the GGUF metadata implies \[8, "),
    ],
    ids=["mxfp4-size", "expert-count"],
)
def test_bad_files_are_refused_in_one_sentence(tmp_path, mx, bad, match):
    bad_file = write_gpt_oss_gguf(mx, tmp_path / "bad.gguf", **bad)
    with pytest.raises(UserError, match=match) as err:
        build(bad_file, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_an_incomplete_file_is_refused_in_one_sentence(tmp_path):
    path = tmp_path / "gpt-oss.gguf"
    w = gguf.GGUFWriter(str(path), "gpt-oss")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UserError, match=r"lacks the metadata key gpt-oss\.\S+; the GGUF file is incomplete") as err:
        build(path, tmp_path / "e")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()
