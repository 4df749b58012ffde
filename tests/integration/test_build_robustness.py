"""Builds that die and engine dirs that are damaged: SIGKILL at random moments of `trtserve build`
(plain and quantized) never leaves a partial engine dir and the next build succeeds; a full file
system gives one clear error and leaves nothing; every damage is refused at load naming the file.

The manifest is unsigned (docs/serving.md): someone who edits a file *and* its manifest entry
defeats the hash check, so loading must still refuse what cannot be a working engine."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import make_hf_model

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.engine.hashing import sha256_file
from trtserve.engine.manifest import MANIFEST, verify_engine_dir


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return make_hf_model(tmp_path_factory.mktemp("src"), "llama")


def _cli_build(src: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trtserve.cli", "build", str(src), "-o", str(out), "--quiet", "--force", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _visible(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if not p.name.startswith("."))


@pytest.mark.timeout(600)  # ten CLI builds, each killed at a random moment
@pytest.mark.parametrize("quant", [None, "w8a16"])
def test_sigkill_at_random_moments_leaves_no_partial_engine(tmp_path, src, quant):
    extra = ("--quant", quant) if quant else ()
    out = tmp_path / "e"
    start = time.monotonic()
    assert _cli_build(src, out, *extra).wait(300) == 0
    whole = time.monotonic() - start
    shutil.rmtree(out)
    rng = random.Random(14)
    for delay in sorted(rng.uniform(0.2, whole) for _ in range(3)):
        proc = _cli_build(src, out, *extra)
        time.sleep(delay)
        proc.kill()  # SIGKILL: no handler, no cleanup
        proc.wait(60)
        # Never a partial engine: either nothing visible, or a build that finished and verifies.
        assert _visible(tmp_path) in ([], ["e"])
        if out.exists():
            verify_engine_dir(out)
    assert _cli_build(src, out, *extra).wait(300) == 0  # and the next build succeeds...
    verify_engine_dir(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e"]  # ...removing the killed builds' staging


@pytest.fixture
def tiny_fs(tmp_path):
    """A small tmpfs (root with CAP_SYS_ADMIN); elsewhere tests/unit/test_engine_dir.py injects ENOSPC."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the injected ENOSPC test covers it")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.timeout(300)
def test_full_file_system_is_a_clear_error_and_leaves_nothing(tiny_fs, src):
    with pytest.raises(UserError, match="No space left on device") as err:
        build_engine(BuildConfig(model=str(src)), tiny_fs / "e", quiet=True)
    assert "check free disk space" in str(err.value)
    assert list(tiny_fs.iterdir()) == []


@pytest.fixture(scope="module")
def engine(tmp_path_factory, src) -> Path:
    out = tmp_path_factory.mktemp("good") / "e"
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), out, quiet=True)
    return out


def _copy(engine: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "e"
    shutil.copytree(engine, dest)
    return dest


def _reseal(eng: Path, rel: str) -> None:
    """Edit the manifest to match a tampered file, as anyone can: it is not signed."""
    manifest = json.loads((eng / MANIFEST).read_text())
    manifest["files"][rel] = {"sha256": sha256_file(eng / rel), "size": (eng / rel).stat().st_size}
    (eng / MANIFEST).write_text(json.dumps(manifest))


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _load(eng: Path) -> None:
    from trtserve.runtime.loader import load_engine

    load_engine(eng, "cpu")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda e: _flip_byte(e / "model.safetensors", -5), "model.safetensors was modified"),
        (lambda e: (e / "model.safetensors").write_bytes(b""), "model.safetensors is truncated"),
        (lambda e: (e / "tokenizer" / "tokenizer.json").unlink(), "tokenizer/tokenizer.json is missing"),
        (lambda e: shutil.rmtree(e / "tokenizer"), "tokenizer/"),
        (lambda e: (e / "config.json").write_text("{}"), "config.json"),
    ],
    ids=["flipped-byte", "truncated", "missing-tokenizer-file", "missing-tokenizer-dir", "config-emptied"],
)
def test_damaged_engine_is_refused_at_load_naming_the_file(engine, tmp_path, damage, message):
    eng = _copy(engine, tmp_path)
    damage(eng)
    with pytest.raises(UserError, match=message):
        _load(eng)


def _config_lies_about_shapes(e: Path) -> str:
    cfg = json.loads((e / "config.json").read_text())
    cfg["pretrained_config"]["hidden_size"] *= 2
    (e / "config.json").write_text(json.dumps(cfg))
    return "config.json"


def _safetensors_header_lies(e: Path) -> str:
    path = e / "model.safetensors"
    data = bytearray(path.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_len])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [header[name]["shape"][0] ^ 1, *header[name]["shape"][1:]]
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= header_len
    text = text.ljust(header_len)  # safetensors pads its header with spaces
    path.write_bytes(bytes(data[:8]) + text + bytes(data[8 + header_len :]))
    return "model.safetensors"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("tamper", [_config_lies_about_shapes, _safetensors_header_lies])
def test_tampered_file_with_a_matching_manifest_is_still_refused(engine, tmp_path, tamper):
    eng = _copy(engine, tmp_path)
    rel = tamper(eng)
    _reseal(eng, rel)
    verify_engine_dir(eng)  # the unsigned manifest is fooled, as docs/serving.md says...
    with pytest.raises(UserError, match=rel.split("/")[-1].split(".")[0]):  # ...but loading is not
        _load(eng)
