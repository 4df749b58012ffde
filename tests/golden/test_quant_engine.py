"""Each quantized engine agrees with NVIDIA ModelOpt's fake-quantized model of the same tiny
checkpoint, calibrated on the same text (see `reference_model`): logits cosine >= 0.999 at every
position, and greedy tokens equal up to near-ties."""

from __future__ import annotations

import json

import pytest
from helpers import make_hf_model

pytest.importorskip("modelopt")

from quant_reference import CALIB, DTYPE, assert_matches_reference, reference_model  # noqa: E402

from trtserve.build.builder import build_engine  # noqa: E402
from trtserve.build.config import BuildConfig  # noqa: E402

# (format, kv cache, int4 group size): every weight format once, both KV formats once, AWQ with
# groups of 64 too.
CASES = [
    ("w8a16", None, 128),
    ("w4a16", None, 128),
    ("w4a16_awq", None, 128),
    ("w4a16_awq", None, 64),
    ("w8a8_sq", "int8", 128),
    ("fp8", "fp8", 128),
    ("fp8_pcpt", None, 128),
    ("w4a8_awq", None, 128),
    ("nvfp4", None, 128),
]
IDS = [q + (f"-kv{k}" if k else "") + ("" if g == 128 else f"-g{g}") for q, k, g in CASES]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A random Llama whose linears all take multiples of 128 inputs (the int4 group size)."""
    d = tmp_path_factory.mktemp("quant-src")
    # initializer_range 0.05: peaked enough for greedy comparisons, tame enough that 8-bit
    # rounding differences do not grow chaotically through the layers.
    return make_hf_model(d, "llama", hidden_size=128, intermediate_size=256, dtype=DTYPE, initializer_range=0.05)


@pytest.mark.parametrize(("quant", "kv", "group"), CASES, ids=IDS)
def test_engine_matches_modelopt_fake_quant(src, tmp_path, quant, kv, group):
    out = tmp_path / "engine"
    build_engine(
        BuildConfig(
            model=str(src),
            quant=quant,
            kv_cache_quant=kv,
            group_size=group,
            dtype="float32",
            tokens_per_block=16,
            **CALIB,
        ),
        out,
        quiet=True,
    )
    ref_model = reference_model(src, quant, kv, group, tmp_path)
    if quant.startswith("w4"):
        ckpt = json.loads((out / "checkpoint" / "config.json").read_text())
        assert ckpt["quantization"]["group_size"] == group
    assert_matches_reference(out, ref_model, quant)
