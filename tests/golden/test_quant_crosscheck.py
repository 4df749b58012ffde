"""trtserve's TensorRT-LLM checkpoint (converted from ModelOpt's HF unified export) against what
NVIDIA's own `export_tensorrt_llm_checkpoint` (modelopt 0.47) writes for the same quantized model:
the same `quantization` config and tensor names, dtypes and shapes, and the same values.

Where the two exporters disagree by design the test says so and checks the function instead:
for AWQ the HF export re-smooths gate/up to one pre-quant scale and folds the q/k/v and gate/up
scales into the norms (so `norm * prequant_scaling_factor` and the dequantized fc/gate weights
are compared), and NVIDIA requantizes fused fp8 parts from the float weights where we can only
requantize the exported fp8 values, and NVIDIA's two exporters already round some fp8 weights
one step apart (so fp8 weights are compared to within one e4m3 step)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import make_hf_model

pytest.importorskip("modelopt")

from trtserve.build.config import BuildConfig  # noqa: E402
from trtserve.models.quant_formats import modelopt_names  # noqa: E402
from trtserve.quant.build import quantization_config, read_export  # noqa: E402
from trtserve.quant.convert import trtllm_tensors  # noqa: E402

CASES = [(q, None) for q in modelopt_names()] + [("w8a8_sq", "int8"), ("fp8", "fp8")]
AWQ = ("w4a16_awq", "w4a8_awq")
# Formats whose smoothing scales depend on each projection's weights (AWQ; SmoothQuant with alpha <
# 1), so both exporters re-smooth the projections that share an input, each its own way.
RESMOOTHED = (*AWQ, "w8a8_sq")


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("xcheck-src")
    return make_hf_model(d, "llama", hidden_size=128, intermediate_size=256, initializer_range=0.05)


def both_exports(src, quant, kv, tmp_path):
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from rich.console import Console
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from trtserve.build.source import open_checkpoint
    from trtserve.quant import modelopt_driver as mo

    reader = open_checkpoint(str(src))
    model = mo.load_hf_model(reader, "LlamaForCausalLM", torch.bfloat16)
    cfg = BuildConfig(model=str(src), quant=quant, kv_cache_quant=kv, calib_size=4, calib_seq_len=32)
    mo.quantize(model, AutoTokenizer.from_pretrained(str(src)), cfg, Console(quiet=True), True)
    nv_dir = tmp_path / "nvidia"
    # Pitfall: inference_tensor_parallel defaults to 0, which crashes.
    export_tensorrt_llm_checkpoint(
        copy.deepcopy(model), "llama", torch.bfloat16, export_dir=nv_dir, inference_tensor_parallel=1
    )
    kv_scales = mo.export(model, torch.bfloat16, tmp_path / "hf")
    hf_quant = json.loads((tmp_path / "hf" / "hf_quant_config.json").read_text())["quantization"]
    if kv_scales:
        hf_quant["kv_cache_quant_algo"] = "INT8"
    ours = trtllm_tensors(
        read_export(tmp_path / "hf") | kv_scales,
        reader.family,
        reader.family.model_config(reader.hf_config, "bfloat16"),
        hf_quant["quant_algo"],
        hf_quant["kv_cache_quant_algo"],
    )
    nv_cfg = json.loads((nv_dir / "config.json").read_text())["quantization"]
    return ours, load_file(str(nv_dir / "rank0.safetensors")), quantization_config(hf_quant), nv_cfg


def unpack_rows(w: torch.Tensor) -> torch.Tensor:
    b = w.view(torch.int8)
    return torch.stack([(b << 4) >> 4, b >> 4], dim=1).reshape(-1, w.shape[1]).float()


def effective(t: dict, p: str, norm: torch.Tensor) -> torch.Tensor:
    """A smoothed linear as one float matrix: dequantized weight (int4 in groups, or int8 per
    channel) x prequant x norm."""
    s = t[p + "weights_scaling_factor"].float()
    if s.dim() == 2:
        w = unpack_rows(t[p + "weight"])
        w = w * s.repeat_interleave(w.shape[1] // s.shape[1], dim=1)
    else:
        w = t[p + "weight"].float() * s[:, None]
    return w * (t[p + "prequant_scaling_factor"].float() * norm.float())[None]


@pytest.mark.parametrize(("quant", "kv"), CASES, ids=[f"{q}-kv{k}" if k else q for q, k in CASES])
def test_checkpoint_equals_nvidia_exporter(src, tmp_path, quant, kv):
    ours, nv, our_cfg, nv_cfg = both_exports(src, quant, kv, tmp_path)
    nv_keys = {k: v for k, v in nv_cfg.items() if v is not None}
    assert {k: v for k, v in our_cfg.model_dump().items() if v is not None} == nv_keys
    assert sorted(ours) == sorted(nv)
    for name in nv:
        assert (ours[name].dtype, ours[name].shape) == (nv[name].dtype, nv[name].shape), name
    fuzzy = set()
    for i in range(2):
        t = f"transformer.layers.{i}."
        if quant in RESMOOTHED:
            fuzzy |= {t + n for n in ("input_layernorm.weight", "post_layernorm.weight")}
            qkv = t + ("attention.qkv.prequant" if quant in AWQ else "attention.qkv.")  # AWQ: q/k/v not re-smoothed
            fuzzy |= {n for n in nv if n.startswith((t + "mlp.fc.", t + "mlp.gate.", qkv))}
            for lin, norm in (
                ("attention.qkv.", "input_layernorm.weight"),
                ("mlp.fc.", "post_layernorm.weight"),
                ("mlp.gate.", "post_layernorm.weight"),
            ):
                a, b = effective(ours, t + lin, ours[t + norm]), effective(nv, t + lin, nv[t + norm])
                cos = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
                assert cos > 0.99, f"{t + lin}: effective weights differ (cosine {cos:.4f})"
                if quant in AWQ and lin == "attention.qkv.":  # not re-smoothed: equal up to the prequant/norm split
                    torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)
        if quant == "fp8":  # NVIDIA's two exporters round fp8 weights differently themselves
            for lin in (
                "attention.qkv.weight",
                "attention.dense.weight",
                "mlp.fc.weight",
                "mlp.gate.weight",
                "mlp.proj.weight",
            ):
                fuzzy.add(t + lin)
                a, b = ours[t + lin].float(), nv[t + lin].float()
                step = (b.abs() / 8).clamp_min(2**-9)  # one e4m3 step (3 mantissa bits)
                assert ((a - b).abs() <= step).all(), f"{t + lin} differs by more than one fp8 step"
    for name in sorted(set(nv) - fuzzy):
        a, b = ours[name], nv[name]
        assert torch.equal(
            a.view(torch.uint8) if a.dtype.itemsize == 1 else a, b.view(torch.uint8) if b.dtype.itemsize == 1 else b
        ), name
