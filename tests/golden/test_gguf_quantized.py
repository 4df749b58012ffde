"""`--quant gguf`, the default for a quantized GGUF: its linears stay at their quantized size. Q4_0 /
Q4_1 / Q4_K blocks are re-encoded exactly (int4 x scale + zero, groups of 32), the 5-8 bit types
rounded to int8 per row; the engine agrees with the dequantized float32 engine of the same file
(`--quant none`), a lossy file's bfloat16 engine is within 1.3x of the file's size, and a type it
cannot keep is refused before anything is written (with --quant gguf) or dequantized with a note."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf_kquants import Q4_K_M, encode, logits, recipe, top1_agreement, write_quantized_gguf
from helpers import make_hf_model, random_prompts, write_gguf
from safetensors.torch import load_file

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.build.gguf_blocks import int4_rows, pack_int4
from trtserve.build.inspect import summarize
from trtserve.engine.errors import UserError
from trtserve.models.quantized import mixed_linear, unpack_int4_rows

LAYERS = 4
# Shaped like a 7B's proportions: embedding and head are ~5% of the weights (they stay dense).
SHAPE = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=LAYERS, initializer_range=0.05)


@pytest.mark.parametrize("kind", [T.Q4_0, T.Q4_1, T.Q4_K])
def test_int4_blocks_reencode_exactly(kind):
    w = np.random.default_rng(3).standard_normal((6, 512)).astype(np.float32) * 0.05
    raw = encode(w, kind)
    rows = int4_rows(raw, kind, w.shape)
    assert torch.equal(rows.dequantize(), torch.from_numpy(quants.dequantize(raw, kind)))
    assert torch.equal(unpack_int4_rows(pack_int4(rows.q)).int() + 8, rows.q.int())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_with_zeros_runs_every_path(dtype):
    """Q4_1's zero points through the decode kernel (1 and 3 rows) and the prefill slabs (80 rows)."""
    w = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32) * 0.05 + 0.02
    rows = int4_rows(encode(w, T.Q4_1), T.Q4_1, w.shape)
    t = {"weight": pack_int4(rows.q), "weights_scaling_factor": rows.scale, "zero": rows.zero}
    linear = mixed_linear(t, dtype)
    ref = rows.dequantize().to(dtype).double()
    for m in (1, 3, 80):
        x = torch.randn(m, 256, generator=torch.Generator().manual_seed(m)).to(dtype)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(linear(x).double(), x.double() @ ref.t(), rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("gguf-quant-src"), "llama", seed=5, **SHAPE)


def build(gguf_file, out, quant=None, dtype="auto"):
    cfg = BuildConfig(model=str(gguf_file), quant=quant, dtype=dtype, tokens_per_block=16, max_seq_len=256)
    build_engine(cfg, out, quiet=True)
    return out


# (file kind, --dtype auto of its kept engine, at most its weight bytes / the file's, top-1 agreement of
# its float32 engine with the dequantized float32 engine at least). This random model's logits are flat:
# bfloat16 rounding alone moves 3 % of its top-1s. Q4_1 is exact, so auto keeps float32 (scales and
# zeros in float32 cost the size); Q8_0 is rounded to int8 per row, and so are Q4_K_M's Q6_K tensors
# (and the q/k/v they are fused with), so auto is bfloat16 there.
CASES = [(Q4_K_M, "bfloat16", 1.3, 0.95), ("Q8_0", "bfloat16", 1.3, 0.9), ("Q4_1", "float32", 1.5, 0.99)]


@pytest.mark.parametrize(("kind", "dtype", "size", "agree"), CASES, ids=[c[0] for c in CASES])
def test_kept_quantization_size_and_agreement(tmp_path, src, kind, dtype, size, agree):
    gguf_file = write_quantized_gguf(src, tmp_path / f"{kind}.gguf", recipe(kind, LAYERS))
    ref = build(gguf_file, tmp_path / "dequantized", quant="none", dtype="float32")
    kept = build(gguf_file, tmp_path / "kept")  # no --quant: gguf, dtype auto
    info = summarize(kept)
    assert info["quant_algo"] == "MIXED_PRECISION" and info["dtype"] == dtype
    assert info["weight_bytes_per_gguf_byte"] <= size, info
    assert summarize(ref)["weight_bytes_per_gguf_byte"] > 3.5  # dequantized to float32
    weights = load_file(kept / "model.safetensors")
    assert weights["transformer.layers.1.attention.qkv.weight"].dtype == torch.int8
    if kind != "Q8_0":  # int4: two rows a byte, with zero points
        assert weights["transformer.layers.1.mlp.fc_gate.weight"].shape == (768, 256)
        assert "transformer.layers.1.mlp.fc_gate.zero" in weights
    # quality in float32, so bfloat16's own rounding (docs/quantization.md) is not counted
    prompts = random_prompts(6, seed=2, lo=8, hi=24)
    kept32 = kept if dtype == "float32" else build(gguf_file, tmp_path / "kept32", dtype="float32")
    assert top1_agreement(logits(ref, prompts), logits(kept32, prompts)) >= agree


def test_q4_k_exact_in_float32(tmp_path, src):
    """In float32 the Q4_K engine computes the dequantized weights (up to summation order)."""
    types = {n: t for n, t in recipe(Q4_K_M, LAYERS).items() if t == T.Q4_K}
    gguf_file = write_quantized_gguf(src, tmp_path / "q4k.gguf", types)
    prompts = random_prompts(3, seed=7, lo=8, hi=20)
    want = logits(build(gguf_file, tmp_path / "dequantized", quant="none", dtype="float32"), prompts)
    got = logits(build(gguf_file, tmp_path / "kept"), prompts)  # auto: float32, every linear Q4_K
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", [T.IQ2_XXS, T.TQ1_0])
def test_a_type_it_cannot_keep_is_refused_and_nothing_written(tmp_path, kind):
    src = make_hf_model(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=256)
    gguf_file = write_gguf(src, tmp_path / "m.gguf", raw_types={"blk.1.ffn_up.weight": kind})
    with pytest.raises(UserError, match=f"GGUF tensor blk.1.ffn_up.weight has type {kind.name}, which --quant gguf"):
        build(gguf_file, tmp_path / "engine", quant="gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "m.gguf"]


def test_quant_gguf_needs_a_gguf_the_torch_backend_and_no_kv_quant(tmp_path, src):
    with pytest.raises(UserError, match="is not a GGUF file"):
        build_engine(BuildConfig(model=str(src), quant="gguf"), tmp_path / "engine", quiet=True)
    with pytest.raises(UserError, match="torch backend only"):
        build_engine(BuildConfig(model=str(src), quant="gguf", backend="tensorrt"), tmp_path / "engine", quiet=True)
    with pytest.raises(UserError, match="--kv-cache-quant needs ModelOpt's calibration"):
        build_engine(BuildConfig(model=str(src), quant="gguf", kv_cache_quant="int8"), tmp_path / "engine", quiet=True)
    assert not (tmp_path / "engine").exists()


def test_no_quant_keeps_a_quantized_gguf_and_none_dequantizes_it(tmp_path, src):
    """No --quant: the file's quantization is kept, silently; --quant none: dequantized, silently (asked
    for); a float GGUF builds dense, as before (nothing to keep)."""
    from click.testing import CliRunner

    from trtserve.cli import main

    gguf_file = write_quantized_gguf(src, tmp_path / "q41.gguf", recipe("Q4_1", LAYERS))
    args = ["build", str(gguf_file), "-o", str(tmp_path / "k"), "--tokens-per-block", "16", "--max-seq-len", "256"]
    kept = CliRunner().invoke(main, args)
    assert kept.exit_code == 0, kept.output
    assert "dequantized" not in kept.output and summarize(tmp_path / "k")["quant_algo"] == "MIXED_PRECISION"
    none = CliRunner().invoke(main, [*args[:3], str(tmp_path / "d"), *args[4:], "--quant", "none"])
    assert none.exit_code == 0, none.output
    assert "dequantized" not in none.output and summarize(tmp_path / "d")["quant_algo"] is None
    float_file = write_gguf(src, tmp_path / "f32.gguf")
    assert summarize(build(float_file, tmp_path / "f"))["quant_algo"] is None


def test_a_type_it_cannot_keep_is_dequantized_by_default_with_a_note(tmp_path):
    from click.testing import CliRunner

    from trtserve.cli import main

    src = make_hf_model(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=256)
    q8 = {f"blk.{i}.{t}.weight": T.Q8_0 for i in range(2) for t in ("ffn_gate", "ffn_down")}
    gguf_file = write_gguf(src, tmp_path / "m.gguf", raw_types=q8 | {"blk.1.ffn_up.weight": T.IQ2_XXS})
    args = ["build", str(gguf_file), "-o", str(tmp_path / "e"), "--tokens-per-block", "16", "--max-seq-len", "256"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "the GGUF's IQ2_XXS, Q8_0 weights were dequantized to float32" in done.output
    assert "no packed format for IQ2_XXS" in done.output
    assert summarize(tmp_path / "e")["quant_algo"] is None


def test_a_backend_that_cannot_keep_it_dequantizes_with_a_note(tmp_path, src):
    from trtserve.build.builder import plan_build

    gguf_file = write_quantized_gguf(src, tmp_path / "q41.gguf", recipe("Q4_1", LAYERS))
    plan = plan_build(BuildConfig(model=str(gguf_file), backend="tensorrt"))
    assert plan.config.quant is None and plan.config.dtype == "float32"
    assert plan.dequantized == "a GGUF's own quantization runs on the torch backend only, not tensorrt"
    with pytest.raises(UserError, match="torch backend only"):
        plan_build(BuildConfig(model=str(gguf_file), backend="tensorrt", quant="gguf"))
