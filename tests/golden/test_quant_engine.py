"""Each quantized engine agrees with NVIDIA ModelOpt's fake-quantized model of the same tiny
checkpoint, calibrated on the same text: logits cosine >= 0.999 at every position, and greedy
tokens equal up to near-ties. NVFP4's fake-quant forward needs CUDA, so its reference is the HF
model running the export's weights dequantized here, independently of trtserve's code."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from helpers import make_hf_model, random_prompts

pytest.importorskip("modelopt")

from trtserve.build.builder import build_engine  # noqa: E402
from trtserve.build.config import BuildConfig  # noqa: E402
from trtserve.models.batch import SeqChunk, make_batch  # noqa: E402
from trtserve.runtime.loader import load_engine  # noqa: E402

CALIB = dict(calib_size=4, calib_seq_len=32)
# (format, kv cache) pairs; every weight format once, both KV formats once.
CASES = [
    ("w8a16", None),
    ("w4a16", None),
    ("w4a16_awq", None),
    ("w8a8_sq", "int8"),
    ("fp8", "fp8"),
    ("fp8_pcpt", None),
    ("w4a8_awq", None),
    ("nvfp4", None),
]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A random Llama whose linears all take multiples of 128 inputs (the int4 group size)."""
    d = tmp_path_factory.mktemp("quant-src")
    return make_hf_model(d, "llama", hidden_size=128, intermediate_size=256, dtype=torch.bfloat16)


def engine_logits(engine_dir, tokens: list[int]) -> torch.Tensor:
    """Float32 logits (len(tokens), vocab) of one prefill through the torch engine."""
    eng = load_engine(engine_dir, device="cpu")
    m, bs = eng.model, 16
    n_blocks = -(-len(tokens) // bs)
    kv = m.new_kv_cache(n_blocks, bs)
    group = m.cfg.num_attention_heads // m.cfg.num_key_value_heads
    batch = make_batch([SeqChunk(tokens, 0, list(range(n_blocks)))], bs, logit_rows=[range(len(tokens))], gqa_group=group)
    return m.forward(batch, kv)


def reference_model(src, quant: str, kv: str | None, tmp_path):
    from rich.console import Console
    from transformers import AutoTokenizer

    from trtserve.build.source import open_checkpoint
    from trtserve.quant import modelopt_driver as mo

    reader = open_checkpoint(str(src))
    model = mo.load_hf_model(reader, "LlamaForCausalLM", torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(str(src))
    calib = (None, CALIB["calib_size"], CALIB["calib_seq_len"])
    mo.quantize(model, tok, quant, kv, calib, Console(quiet=True), quiet=True)
    if quant != "nvfp4":
        return model
    mo.export(model, torch.bfloat16, tmp_path / "export")
    return dequantized_nvfp4(src, tmp_path / "export")


def dequantized_nvfp4(src, export_dir):
    """The HF model with every linear replaced by its NVFP4 export, decoded: E2M1 value (low
    nibble = even input) x fp8 block scale (16 inputs) x global scale."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    lut = torch.tensor(e2m1 + [-v for v in e2m1])
    t = load_file(str(export_dir / "model.safetensors"))
    state = {}
    for name, w in t.items():
        if name.endswith(".weight") and w.dtype == torch.uint8:
            p = name[: -len("weight")]
            codes = torch.stack([w & 15, w >> 4], dim=-1).reshape(w.shape[0], -1).long()
            scale = t[p + "weight_scale"].float().repeat_interleave(16, dim=1) * t[p + "weight_scale_2"].float()
            state[name] = (lut[codes] * scale).to(torch.bfloat16)
        elif not name.endswith(("_scale", "_scale_2")):
            state[name] = t[name]
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16).eval()
    model.load_state_dict(state, strict=True)
    return model


@pytest.mark.parametrize(("quant", "kv"), CASES, ids=[f"{q}-kv{k}" if k else q for q, k in CASES])
def test_engine_matches_modelopt_fake_quant(src, tmp_path, quant, kv):
    out = tmp_path / "engine"
    build_engine(BuildConfig(model=str(src), quant=quant, kv_cache_quant=kv, tokens_per_block=16, **CALIB), out, quiet=True)
    ref_model = reference_model(src, quant, kv, tmp_path)
    for tokens in random_prompts(3, seed=11, lo=8, hi=48):
        ours = engine_logits(out, tokens)  # (T, vocab)
        with torch.inference_mode():
            ref = ref_model(torch.tensor([tokens])).logits[0].float()  # (T, vocab)
        cos = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
        assert cos.min() >= 0.999, f"{quant}: logits cosine {cos.min():.5f} at position {cos.argmin()}"
        top = ref.argmax(-1)
        mine = ours.argmax(-1)
        gap = ref.gather(1, top[:, None]) - ref.gather(1, mine[:, None])  # 0 where equal
        spread = ref.max(-1).values - ref.min(-1).values
        assert (gap[:, 0] <= 0.01 * spread).all(), f"{quant}: greedy token differs beyond a near-tie"
        if quant != "nvfp4":
            assert (mine == top).float().mean() >= 0.9


del sys, copy
