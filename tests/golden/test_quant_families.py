"""Every ModelOpt --quant format on every dense family of issue 46 (Phi-3's fused qkv_proj and
gate_up_proj, q/k norms, Gemma's (1 + weight) norms that AWQ folds its scales into), each KV-cache
format beside the format the llama goldens pair it with: the engine agrees with ModelOpt's
fake-quantized model as test_quant_engine.py's llama engines do."""

from __future__ import annotations

import pytest
from dense_families import DENSE
from family_goldens import make_model

pytest.importorskip("modelopt")

from quant_reference import assert_matches_reference, reference_model  # noqa: E402

from trtserve.build.builder import build_engine  # noqa: E402
from trtserve.build.config import BuildConfig  # noqa: E402
from trtserve.models.quant_formats import modelopt_names  # noqa: E402
from trtserve.models.registry import _FAMILIES  # noqa: E402

# every linear's in-features a multiple of 128 (the int4 group); initializer_range as test_quant_engine's
QUANT_SHAPE = dict(hidden_size=128, intermediate_size=256, initializer_range=0.05)
CALIB = dict(calib_size=1, calib_seq_len=16)  # one short text: AWQ's search runs once a pair, twice with the reference
KV = {"w8a8_sq": "int8", "fp8": "fp8"}
# The engine and HF differ in float32's last bits (~2e-6 of a logit); on gemma3 that has flipped one fp8
# rounding of an activation near a step, which the later positions carry (cosine 0.9983 from there on).
MIN_COS = {"gemma3": 0.997}
PAIRS = [(name, quant) for name in sorted(DENSE) for quant in modelopt_names()]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Family name -> its tiny checkpoint, made on first use."""
    made = {}

    def get(name):
        if name not in made:
            model_type, overrides = DENSE[name]
            shape = QUANT_SHAPE | ({"head_dim": 32} if "head_dim" in overrides else {})  # o_proj's in: 4 x 32
            made[name] = make_model(tmp_path_factory.mktemp(name) / "hf", model_type, seed=2, **overrides | shape)
        return made[name]

    return get


@pytest.mark.parametrize(("name", "quant"), PAIRS, ids=[f"{n}-{q}" for n, q in PAIRS])
def test_each_family_and_format_pair_matches_modelopt_fake_quant(sources, tmp_path, name, quant):
    assert _FAMILIES[name].quant_formats is None  # the family spec takes every format
    src, out, kv = sources(name), tmp_path / "engine", KV.get(quant)
    cfg = BuildConfig(model=str(src), quant=quant, kv_cache_quant=kv, dtype="float32", tokens_per_block=16, **CALIB)
    build_engine(cfg, out, quiet=True)
    ref = reference_model(src, quant, kv, 128, tmp_path, CALIB)
    assert_matches_reference(out, ref, quant, MIN_COS.get(name, 0.999))
