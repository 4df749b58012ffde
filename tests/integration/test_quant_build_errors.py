"""Bad quantization requests to `trtserve build`: one sentence naming what cannot work and what
can, exit code 2, nothing left behind, and no minutes of calibration spent first."""

from __future__ import annotations

import pytest
from helpers import make_hf_model
from test_build_errors import expect_error


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    # hidden 64, intermediate 96: no int4 group of 128 fits; NVFP4's 16 does.
    return make_hf_model(tmp_path_factory.mktemp("q") / "m", "llama")


def test_int4_needs_in_features_divisible_by_128(tmp_path, src):
    expect_error(
        tmp_path,
        "--quant w4a16_awq needs every linear's in-features divisible by 128, but hidden_size = 64, "
        "num_attention_heads * head_size = 64, intermediate_size = 96; formats that work for this model: "
        "w8a16, w8a8_sq, fp8, fp8_pcpt, nvfp4",
        src,
        "--quant",
        "w4a16_awq",
    )


def test_int4_suggests_groups_of_64_where_they_fit(tmp_path):
    # SmolLM2-135M's widths: 576 = 4.5 x 128, 1536 = 12 x 128
    m = make_hf_model(tmp_path / "m", "llama", hidden_size=576, num_attention_heads=9, intermediate_size=1536)
    expect_error(
        tmp_path,
        "--quant w4a16 needs every linear's in-features divisible by 128, but hidden_size = 576, "
        "num_attention_heads * head_size = 576; formats that work for this model: w8a16, w4a16 --group-size 64, "
        "w4a16_awq --group-size 64, w8a8_sq, fp8, fp8_pcpt, nvfp4",
        m,
        "--quant",
        "w4a16",
    )


def test_group_size_64_still_has_to_divide(tmp_path, src):
    expect_error(
        tmp_path,
        "--quant w4a16_awq needs every linear's in-features divisible by 64, but intermediate_size = 96",
        src,
        "--quant",
        "w4a16_awq",
        "--group-size",
        "64",
    )


@pytest.mark.parametrize("quant", [[], ["--quant", "w4a8_awq"], ["--quant", "fp8"]])
def test_group_size_only_for_int4_groups(tmp_path, src, quant):
    expect_error(
        tmp_path, "--group-size 64 applies to int4 groups (w4a16, w4a16_awq), not to", src, *quant, "--group-size", "64"
    )


@pytest.mark.parametrize("quant", [[], ["--quant", "w8a16"]])
def test_smoothquant_alpha_only_for_w8a8_sq(tmp_path, src, quant):
    expect_error(
        tmp_path, "--smoothquant-alpha applies to --quant w8a8_sq only", src, *quant, "--smoothquant-alpha", "0.8"
    )


def test_smoothquant_alpha_range(tmp_path, src):
    expect_error(
        tmp_path,
        "'smoothquant_alpha': Input should be less than or equal to 1",
        src,
        "--quant",
        "w8a8_sq",
        "--smoothquant-alpha",
        "1.5",
    )


def test_group_size_choices(tmp_path, src):
    expect_error(tmp_path, "Invalid value for '--group-size'", src, "--quant", "w4a16", "--group-size", "32")


def test_nvfp4_needs_16(tmp_path):
    m = make_hf_model(tmp_path / "m", "llama", hidden_size=72, num_attention_heads=4, intermediate_size=96)
    expect_error(
        tmp_path,
        "--quant nvfp4 needs every linear's in-features divisible by 16, but hidden_size = 72",
        m,
        "--quant",
        "nvfp4",
    )


def test_kv_cache_quant_needs_a_weight_format(tmp_path, src):
    expect_error(
        tmp_path, "--kv-cache-quant fp8 needs a weight format too; add --quant", src, "--kv-cache-quant", "fp8"
    )


def test_quant_with_tensor_parallel(tmp_path, src):
    expect_error(tmp_path, "builds tp-size 1 checkpoints only", src, "--quant", "w8a16", "--tp-size", "2")


def test_unknown_format(tmp_path, src):
    expect_error(tmp_path, "Invalid value for '--quant'", src, "--quant", "int3")


def test_unknown_format_in_yaml(tmp_path, src):
    cfg = tmp_path / "b.yaml"
    cfg.write_text(f"model: {src}\nquant: int3\n")
    expect_error(tmp_path, "'quant': got 'int3'", "--config", cfg)


def test_calib_data_missing(tmp_path, src):
    expect_error(
        tmp_path,
        f"cannot read --calib-data {tmp_path / 'no.txt'}",
        src,
        "--quant",
        "fp8",
        "--calib-data",
        tmp_path / "no.txt",
    )


def test_calib_data_bad_jsonl(tmp_path, src):
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "no text key"}\n')
    expect_error(
        tmp_path, f'--calib-data {bad} line 2 has no "text" string', src, "--quant", "fp8", "--calib-data", bad
    )


def test_calib_data_without_quant(tmp_path, src):
    txt = tmp_path / "c.txt"
    txt.write_text("some text")
    expect_error(tmp_path, "--calib-data is only used with --quant", src, "--calib-data", txt)


def test_calib_size_must_be_positive(tmp_path, src):
    expect_error(tmp_path, "'calib_size'", src, "--quant", "fp8", "--calib-size", "0")
