"""`trtserve check --level smoke` passes on every supported family and every quant format (and both
KV-cache formats), and fails when the engine computes something else."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from helpers import make_hf_model

from trtserve.check.runner import Options, run_checks
from trtserve.models.quant_formats import KV_CACHE_FORMATS, QUANT_FORMATS

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
# (source arch, its config overrides, dtype): every family and the layer features its configs turn on
FAMILIES = {
    "llama-gqa": ("llama", {}, "float32"),
    "llama-mqa-head-dim-tied-llama3": (
        "llama",
        {"head_dim": 32, "num_key_value_heads": 1, "tie_word_embeddings": True, "rope_parameters": LLAMA3_ROPE},
        "float32",
    ),
    "llama-bf16": ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}}, "bfloat16"),
    "mistral-sliding": ("mistral", {"sliding_window": 24}, "float32"),
    "mistral-fp16": ("mistral", {"sliding_window": 24}, "float16"),
    "qwen2-bias": ("qwen2", {}, "float32"),
    "qwen2-bf16-mha": ("qwen2", {"num_key_value_heads": 4}, "bfloat16"),
}
# (--quant, --kv-cache-quant, extra): every recipe once, both KV-cache formats, int4 groups of 64
QUANTS = [
    ("w8a16", None, {}),
    ("w4a16", None, {"group_size": 64}),
    ("w4a16_awq", "fp8", {}),
    ("w8a8_sq", "int8", {"smoothquant_alpha": 0.8}),
    ("fp8", "fp8", {}),
    ("fp8_pcpt", None, {}),
    ("w4a8_awq", None, {}),
    ("nvfp4", None, {}),
]


def smoke(tmp_path: Path, cfg: dict) -> tuple[str, str]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (rep,) = run_checks([path], Options(level="smoke"))
    results = {r.name: r for r in rep.results}
    assert str(results["plan"].status) == "pass", results["plan"].message
    return str(results["smoke"].status), results["smoke"].message


@pytest.mark.parametrize("case", list(FAMILIES))
def test_smoke_passes_on_every_family(tmp_path, case):
    arch, overrides, dtype = FAMILIES[case]
    src = make_hf_model(tmp_path / "hf", arch, **overrides)
    status, message = smoke(tmp_path, {"model": str(src), "dtype": dtype})
    assert status == "pass", message
    assert "equal HF transformers'" in message


@pytest.fixture(scope="module")
def quant_src(tmp_path_factory) -> Path:
    """Widths every format's block divides (int4 groups of 128)."""
    return make_hf_model(tmp_path_factory.mktemp("check-quant-src"), "llama", hidden_size=128, intermediate_size=256)


def test_the_cases_cover_every_format():
    from trtserve.models.quant_formats import by_name

    modelopt = {a for a, s in QUANT_FORMATS.items() if s.source is None}  # gguf: tests/golden/test_gguf_quantized.py
    assert {by_name(q)[0].quant_algo for q, _, _ in QUANTS} == modelopt
    assert {kv for _, kv, _ in QUANTS if kv} == {s.name for s in KV_CACHE_FORMATS.values()}


@pytest.mark.parametrize(("quant", "kv", "extra"), QUANTS, ids=[q + (f"-kv{k}" if k else "") for q, k, _ in QUANTS])
def test_smoke_passes_on_every_quant_format(tmp_path, quant_src, quant, kv, extra):
    cfg = {"model": str(quant_src), "quant": quant} | ({"kv_cache_quant": kv} if kv else {}) | extra
    status, message = smoke(tmp_path, cfg)
    assert status == "pass", message
    assert message.startswith(quant) and "consistent with the prefill" in message


@pytest.fixture
def shifted_logits(monkeypatch):
    """The engine's logits rolled by one token: a model that is not the one it was built from."""
    from trtserve.models.decoder import DecoderModel

    forward = DecoderModel.forward
    monkeypatch.setattr(DecoderModel, "forward", lambda self, *a, **k: torch.roll(forward(self, *a, **k), 1, -1))


def test_smoke_fails_when_the_engine_differs_from_hf(tmp_path, shifted_logits):
    src = make_hf_model(tmp_path / "hf", "llama")
    status, message = smoke(tmp_path, {"model": str(src), "dtype": "float32"})
    assert status == "fail"
    assert message.startswith("greedy tokens differ from HF transformers' beyond a near-tie: prompt 0, token 0:")


def test_smoke_fails_when_a_quantized_engine_loses_too_much(tmp_path, quant_src, shifted_logits):
    status, message = smoke(tmp_path, {"model": str(quant_src), "quant": "w8a16"})
    assert status == "fail"
    assert "the engine loses more than the format should" in message
