"""Bad input to `trtserve build`: one clear sentence, exit code 2, and nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gguf
import pytest
import torch
from click.testing import CliRunner
from helpers import make_hf_model, write_gguf
from safetensors.torch import load_file, save_file

from trtserve.cli import main


@pytest.fixture(scope="module")
def good_src(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("hf") / "m", "llama")


def _copy(src, dest):
    import shutil

    shutil.copytree(src, dest)
    return dest


def run_build(tmp_path, *args):
    """Run the CLI; return (exit code, output) and assert no engine or temp dir was left."""
    out = tmp_path / "out" / "engine"
    existed = out.exists()
    result = CliRunner().invoke(main, ["build", *map(str, args), "-o", str(out), "--quiet"])
    leftovers = list((tmp_path / "out").glob(".engine.*")) if (tmp_path / "out").exists() else []
    assert not leftovers, leftovers
    if result.exit_code != 0:
        assert out.exists() == existed
    return result.exit_code, result.output


def expect_error(tmp_path, fragment, *args):
    code, output = run_build(tmp_path, *args)
    assert code == 2, output
    assert fragment in output, output
    assert "Traceback" not in output
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") or lines[-1].startswith("Error: "), output


def test_missing_model_path(tmp_path):
    expect_error(tmp_path, "does not exist; give a Hugging Face model directory", tmp_path / "nope")


def test_dir_without_config(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    (src / "config.json").unlink()
    expect_error(tmp_path, "config.json is missing", src)


def test_config_not_json(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    (src / "config.json").write_text("{not json")
    expect_error(tmp_path, "is not valid JSON", src)


def test_unsupported_architecture(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"], cfg["model_type"] = ["GPT2LMHeadModel"], "gpt2"
    (src / "config.json").write_text(json.dumps(cfg))
    from trtserve.models.registry import supported

    assert "LlamaForCausalLM" in supported() and "Qwen3ForCausalLM" in supported()
    expect_error(tmp_path, f"GPT2LMHeadModel is not supported; trtserve builds: {supported()}", src)


def test_truncated_safetensors(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    f = src / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    expect_error(tmp_path, "model.safetensors is truncated or corrupted", src)


def test_corrupted_safetensors_header(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    f = src / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[8:40] = b"#" * 32
    f.write_bytes(bytes(data))
    expect_error(tmp_path, "is truncated or corrupted", src)


def test_tensor_with_wrong_shape(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    sd = load_file(src / "model.safetensors")
    sd["model.layers.1.mlp.up_proj.weight"] = torch.zeros(95, 64)
    save_file(sd, src / "model.safetensors")
    expect_error(
        tmp_path, "tensor model.layers.1.mlp.up_proj.weight has shape [95, 64] but config.json implies [96, 64]", src
    )


def test_missing_tensor(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    sd = load_file(src / "model.safetensors")
    del sd["model.norm.weight"]
    save_file(sd, src / "model.safetensors")
    expect_error(tmp_path, "lacks 1 tensor(s) its config implies, e.g. model.norm.weight", src)


def test_bin_only_checkpoint(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    (src / "model.safetensors").rename(src / "pytorch_model.bin")
    expect_error(tmp_path, "holds only PyTorch .bin weights; re-save them as safetensors", src)


def test_missing_tokenizer(tmp_path, good_src):
    src = _copy(good_src, tmp_path / "m")
    (src / "tokenizer.json").unlink()
    expect_error(tmp_path, "no tokenizer in", src)


def test_unknown_dtype_value(tmp_path, good_src):
    expect_error(tmp_path, "'float8' is not one of", good_src, "--dtype", "float8")


def test_bad_tokens_per_block(tmp_path, good_src):
    expect_error(
        tmp_path, "'tokens_per_block': Value error, must be a power of two", good_src, "--tokens-per-block", "48"
    )


def test_max_seq_len_beyond_context(tmp_path, good_src):
    expect_error(
        tmp_path, "--max-seq-len 100000 exceeds the model's context of 256 tokens", good_src, "--max-seq-len", "100000"
    )


def test_unwritable_output(tmp_path, good_src):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(main, ["build", str(good_src), "-o", str(blocker / "engine"), "--quiet"])
    assert result.exit_code == 2 and "cannot write the engine under" in result.output, result.output
    assert "choose a writable -o" in result.output


def test_existing_output_needs_force(tmp_path, good_src):
    out = tmp_path / "out" / "engine"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    expect_error(tmp_path, "already exists; pass --force", good_src)
    # --force never deletes a directory that is not an engine dir
    result = CliRunner().invoke(main, ["build", str(good_src), "-o", str(out), "--force", "--quiet"])
    assert result.exit_code == 2 and "not an engine dir; refusing" in result.output
    assert (out / "keep.txt").read_text() == "mine"


def test_gguf_tensor_type_we_cannot_read(tmp_path, good_src):
    f = write_gguf(good_src, tmp_path / "q81.gguf", raw_types={"blk.0.ffn_up.weight": gguf.GGMLQuantizationType.Q8_1})
    expect_error(tmp_path, "GGUF tensor blk.0.ffn_up.weight has type Q8_1, which trtserve cannot read", f)


def test_not_a_gguf_file(tmp_path):
    f = tmp_path / "weights.gguf"
    f.write_bytes(b"GGUF" + b"\x00" * 10)
    expect_error(tmp_path, "is not a readable GGUF file", f)


def test_random_file_is_not_a_model(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    expect_error(tmp_path, "is neither a Hugging Face model directory nor a GGUF file", f)


def test_yaml_config_errors(tmp_path, good_src):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dtype: [unclosed")
    expect_error(tmp_path, "is not valid YAML", good_src, "--config", bad)
    bad.write_text("dtype: float32\nmax_batch: 4\n")
    expect_error(tmp_path, "'max_batch': unknown key (allowed: model, dtype", good_src, "--config", bad)
    bad.write_text("max_batch_size: -1\n")
    expect_error(tmp_path, "'max_batch_size': Input should be greater than or equal to 1", good_src, "--config", bad)
    expect_error(tmp_path, "cannot read config file", good_src, "--config", tmp_path / "missing.yaml")


def test_yaml_config_supplies_every_flag(tmp_path, good_src):
    cfg = tmp_path / "build.yaml"
    cfg.write_text(f"model: {good_src}\ndtype: bfloat16\nmax_seq_len: 128\ntokens_per_block: 16\nmax_batch_size: 4\n")
    out = tmp_path / "e"
    result = CliRunner().invoke(
        main, ["build", "--config", str(cfg), "-o", str(out), "--quiet", "--max-batch-size", "8"]
    )
    assert result.exit_code == 0, result.output
    engine = json.loads((out / "config.json").read_text())
    assert engine["pretrained_config"]["dtype"] == "bfloat16"
    assert engine["build_config"]["max_seq_len"] == 128
    assert engine["build_config"]["max_batch_size"] == 8  # the flag wins over the file
    assert engine["build_config"]["plugin_config"]["tokens_per_block"] == 16


def test_real_process_exit_code_and_stderr(tmp_path):
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "trtserve.cli", "build", str(tmp_path / "nope"), "-o", str(tmp_path / "e")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: MODEL") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
