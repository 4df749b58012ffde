"""Engine dirs: reproducible manifests, integrity checks on load, atomic and interruptible writes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from helpers import make_hf_model, read_json

from trtserve.build import tensors as build_tensors
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.cli import main
from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.manifest import verify_engine_dir


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("hf") / "m", "llama", tie_word_embeddings=True)


def _build(src, out, **kw):
    build_engine(BuildConfig(model=str(src), **kw), out, quiet=True)
    return out


def test_manifest_lists_every_file_and_the_build(tmp_path, src):
    eng = _build(src, tmp_path / "e")
    m = read_json(eng / "manifest.json")
    files = {p.relative_to(eng).as_posix() for p in eng.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(m["files"]) == files
    assert {"config.json", "model.safetensors", "checkpoint/config.json", "checkpoint/rank0.safetensors"} <= files
    assert any(f.startswith("tokenizer/") for f in files)
    assert set(m["toolchain"]) >= {"trtserve", "torch", "transformers"}
    assert m["backend"] == "torch" and m["target_device"] == "cpu"
    assert m["source"]["fingerprint"].startswith("sha256:")
    assert m["build_config"]["max_seq_len"] == 256 and m["build_config"]["dtype"] == "float32"


def test_same_inputs_give_the_same_manifest(tmp_path, src):
    a = read_json(_build(src, tmp_path / "a") / "manifest.json")
    time.sleep(1.1)
    b = read_json(_build(src, tmp_path / "b") / "manifest.json")
    assert a.pop("created_at") != b.pop("created_at")
    assert a == b


def test_a_different_source_changes_the_fingerprint(tmp_path, src):
    other = make_hf_model(tmp_path / "other", "llama", seed=1, tie_word_embeddings=True)
    a = read_json(_build(src, tmp_path / "a") / "manifest.json")
    b = read_json(_build(other, tmp_path / "b") / "manifest.json")
    assert a["source"]["fingerprint"] != b["source"]["fingerprint"]


@pytest.mark.parametrize(
    "damage,message",
    [
        (
            lambda e: (e / "model.safetensors").write_bytes((e / "model.safetensors").read_bytes()[:-10]),
            "model.safetensors is truncated",
        ),
        (lambda e: (e / "checkpoint/rank0.safetensors").unlink(), "checkpoint/rank0.safetensors is missing"),
        (
            lambda e: (e / "tokenizer/tokenizer.json").write_text(
                (e / "tokenizer/tokenizer.json").read_text().replace("a", "b")
            ),
            "tokenizer/tokenizer.json was modified",
        ),
        (lambda e: (e / "manifest.json").write_text("{"), "manifest.json is corrupted"),
    ],
)
def test_damaged_engine_is_refused_by_name(tmp_path, src, damage, message):
    eng = _build(src, tmp_path / "e")
    verify_engine_dir(eng)
    damage(eng)
    with pytest.raises(EngineIntegrityError, match=message):
        verify_engine_dir(eng)
    result = CliRunner().invoke(main, ["inspect", str(eng)])
    assert result.exit_code == 2 and message in result.output


def test_not_an_engine_dir(tmp_path):
    with pytest.raises(UserError, match="is not a trtserve engine dir"):
        verify_engine_dir(tmp_path)
    with pytest.raises(UserError, match="does not exist; build one"):
        verify_engine_dir(tmp_path / "none")


def test_force_replaces_an_engine(tmp_path, src):
    eng = _build(src, tmp_path / "e", max_seq_len=64)
    with pytest.raises(UserError, match="already exists"):
        _build(src, eng)
    build_engine(BuildConfig(model=str(src), max_seq_len=128), eng, force=True, quiet=True)
    assert read_json(eng / "config.json")["build_config"]["max_seq_len"] == 128
    assert [p.name for p in tmp_path.iterdir()] == ["e"]


def test_failure_midway_leaves_nothing(tmp_path, src, monkeypatch):
    calls = []

    def failing(path, specs, on_tensor=lambda: None):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(path, specs, on_tensor)

    real = build_tensors.write_safetensors
    monkeypatch.setattr(build_tensors, "write_safetensors", failing)
    with pytest.raises(KeyboardInterrupt):
        _build(src, tmp_path / "e")
    assert list(tmp_path.iterdir()) == []


def test_disk_error_is_a_clear_message(tmp_path, src, monkeypatch):
    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(build_tensors, "write_safetensors", full)
    with pytest.raises(UserError, match="No space left on device"):
        _build(src, tmp_path / "e")
    assert list(tmp_path.iterdir()) == []


def _default_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_signal_during_build_leaves_nothing(tmp_path):
    big = make_hf_model(
        tmp_path / "big",
        "llama",
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=32000,
    )
    out = tmp_path / "out"
    out.mkdir()
    for sig in (signal.SIGINT, signal.SIGTERM):
        for _attempt in range(3):
            proc = subprocess.Popen(
                [sys.executable, "-m", "trtserve.cli", "build", str(big), "-o", str(out / "e"), "--quiet"],
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=_default_signals,  # as from a shell, whatever earlier tests did to pytest's own
            )
            deadline = time.time() + 120
            while not list(out.glob(".e.building-*")) and proc.poll() is None and time.time() < deadline:
                time.sleep(0.01)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
            if proc.returncode == 0 and (out / "e").is_dir():
                # On a loaded machine the build can finish (and sit in interpreter shutdown, where a
                # signal is ignored) before the signal lands: that says nothing about cleanup, so retry.
                shutil.rmtree(out / "e")
                continue
            assert proc.returncode == 130, err
            assert list(out.iterdir()) == [], err
            break
        else:
            pytest.fail("every build finished before the signal landed")


def test_stale_staging_of_a_killed_build_is_removed(tmp_path, src):
    stale = tmp_path / ".e.building-999999999-abc"
    stale.mkdir()
    (stale / "junk").write_text("x")
    _build(src, tmp_path / "e")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e"]


def test_inspect_reports_capacity(tmp_path, src):
    eng = _build(src, tmp_path / "e", tokens_per_block=16, max_seq_len=128)
    result = CliRunner().invoke(main, ["inspect", str(eng), "--memory", "4MiB", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    kv_per_token = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads, head 16, float32
    assert info["kv_bytes_per_token"] == kv_per_token
    weights = (tmp_path / "e" / "model.safetensors").stat().st_size
    assert info["weight_bytes"] == weights
    blocks = (4 * 2**20 - weights) // (kv_per_token * 16)
    assert info["kv_blocks"] == blocks and info["tokens_fit"] == blocks * 16
    assert info["full_length_sequences_fit"] == blocks // 8
    bad = CliRunner().invoke(main, ["inspect", str(eng), "--memory", "lots"])
    assert bad.exit_code == 2 and "is not a size" in bad.output
    small = CliRunner().invoke(main, ["inspect", str(eng), "--memory", "1KiB"])
    assert small.exit_code == 2 and "does not even hold the weights" in small.output
