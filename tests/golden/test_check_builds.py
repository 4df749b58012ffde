"""`trtserve check` on a tiny random model: each check fails on a config made to break it, with its
message and exit code 1; the lock round trip with `trtserve build --lock`; `full` against
`checks.expect`; a JUnit report of a real run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from helpers import make_hf_model

from trtserve.check.runner import Options, run_checks
from trtserve.cli import main


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """hidden 64, intermediate 96, 4 heads (2 KV), 2 layers, vocab 320, 256 positions."""
    return make_hf_model(tmp_path_factory.mktemp("check-src"), "llama")


def write(tmp_path: Path, data: dict, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def run(path: Path, **options) -> dict:
    """{check name: (status, message, detail)} of one config."""
    (rep,) = run_checks([path], Options(**options))
    return {r.name: (str(r.status), r.message, r.detail) for r in rep.results}


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"quant": "w4a16"}, "--quant w4a16 needs every linear's in-features divisible by 128, but hidden_size = 64"),
        ({"quant": "w8a16", "backend": "trtllm"}, "--quant with --backend trtllm is not supported"),
        ({"tp_size": 3}, "--tp-size 3 does not divide num_attention_heads 4"),
        ({"kv_cache_quant": "fp8"}, "--kv-cache-quant fp8 needs a weight format too"),
        ({"backend": "tensorrt", "target": "cpu-32gb"}, "backend tensorrt runs on CUDA GPUs, but target cpu-32gb"),
    ],
)
def test_support_fails_an_unsupported_combination(tmp_path, src, extra, words):
    path = write(tmp_path, {"model": str(src), "target": "l4-24gb"} | extra)
    got = run(path, level="smoke")
    assert got["schema"][0] == "pass"
    assert got["support"][0] == "fail" and words in got["support"][1]
    assert got["plan"][:2] == ("skip", "needs support, which failed")
    assert all(got[c][0] == "skip" for c in ("memory", "smoke", "full", "lock"))
    out = cli("check", path, "--json", tmp_path / "r.json")
    assert out.exit_code == 1, out.output
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["failed"] == 1


def test_plan_fails_beyond_the_model_context(tmp_path, src):
    got = run(write(tmp_path, {"model": str(src), "max_seq_len": 1000}))
    assert got["support"][0] == "pass"
    assert got["plan"][0] == "fail" and "--max-seq-len 1000 exceeds the model's context of 256" in got["plan"][1]


def _memory(tmp_path, src, **cfg) -> tuple[str, str]:
    return run(write(tmp_path, {"model": str(src), "max_seq_len": 256} | cfg))["memory"][:2]


def test_memory_fails_a_target_too_small_and_names_the_batch_that_fits(tmp_path, src):
    from trtserve.build.builder import plan_build
    from trtserve.build.config import BuildConfig
    from trtserve.check.memory import estimate
    from trtserve.check.targets import resolve_target

    plan = plan_build(BuildConfig(model=str(src), max_seq_len=256, max_batch_size=64))
    est = estimate(plan, resolve_target("1GiB"))
    per_seq = est.kv_per_sequence + est.logits_per_sequence
    target = est.weights + est.activations + 10 * per_seq + per_seq // 2  # room for 10.5 sequences
    status, message = _memory(tmp_path, src, max_batch_size=64, target=target)
    assert status == "fail" and message.startswith(f"does not fit {target} bytes:")
    assert "; 10 full-length sequences fit, so lower max_batch_size to 10 (or max_seq_len)" in message
    status, message = _memory(tmp_path, src, max_batch_size=10, target=target)
    assert status == "pass" and "10 full-length sequences fit (the largest max_batch_size)" in message
    assert _memory(tmp_path, src, max_batch_size=11, target=target)[0] == "fail"
    status, message = _memory(tmp_path, src, target="64KiB")
    assert status == "fail" and "not even one full-length sequence fits" in message


def test_memory_is_per_gpu_with_tensor_parallelism(tmp_path, src):
    from trtserve.build.builder import plan_build
    from trtserve.build.config import BuildConfig
    from trtserve.check.memory import estimate
    from trtserve.check.targets import resolve_target

    one, two = (
        estimate(plan_build(BuildConfig(model=str(src), tp_size=tp)), resolve_target("h100-80gb")) for tp in (1, 2)
    )
    assert two.kv_per_sequence * 2 == one.kv_per_sequence  # 2 KV heads: one per GPU
    assert one.weights / 2 < two.weights < one.weights  # embeddings and norms are replicated
    assert "fits h100-80gb per GPU (tp 2)" in _memory(tmp_path, src, tp_size=2, target="h100-80gb")[1]
    assert _memory(tmp_path, src)[:2] == (
        "skip",
        "no target; give --target or set `target:` (a preset like l4-24gb, or a size)",
    )


def test_plan_of_a_tensorrt_config_gives_the_trtllm_commands(tmp_path, src):
    path = write(tmp_path, {"model": str(src), "backend": "tensorrt", "dtype": "float16", "target": "h100-80gb"})
    got = run(path, level="smoke")
    assert got["plan"][0] == "pass" and "TensorRT-LLM BuildConfig and commands resolved" in got["plan"][1]
    assert "trtllm-build --checkpoint_dir" in got["plan"][2] and "trtllm-serve" in got["plan"][2]
    assert got["smoke"][0] == "skip" and "runs on a GPU with TensorRT-LLM" in got["smoke"][1]
    out = cli("check", path, "--details")
    assert out.exit_code == 0 and "trtllm-build --checkpoint_dir" in out.output


def _edit_lock(path: Path, edit) -> Path:
    data = json.loads(path.read_text())
    edit(data)
    out = path.with_name("edited.lock")
    out.write_text(json.dumps(data))
    return out


def test_lock_reports_drift_in_toolchain_inputs_and_files(tmp_path, src):
    config = write(tmp_path, {"model": str(src), "dtype": "float32", "max_seq_len": 128, "tokens_per_block": 16})
    lock = tmp_path / "engine.lock"
    built = cli("build", "--config", config, "-o", tmp_path / "engine", "--lock", lock, "--quiet")
    assert built.exit_code == 0, built.output
    data = json.loads(lock.read_text())
    assert {"source", "toolchain", "build_config", "files"} <= data.keys() and "model.safetensors" in data["files"]

    assert run(config, lock=lock)["lock"][:2] == ("pass", f"inputs and toolchain match {lock}")
    full = run(config, lock=lock, level="full")  # rebuilt: builds repeat, so every file matches
    assert full["full"][0] == "pass" and full["lock"][:2] == ("pass", f"inputs, toolchain and built files match {lock}")

    old_torch = _edit_lock(lock, lambda d: d["toolchain"].update(torch="2.0.0"))
    status, message, detail = run(config, lock=old_torch)["lock"]
    assert status == "fail" and message.startswith(f"1 difference from {old_torch}: toolchain.torch: 2.0.0 (lock) -> ")
    out = cli("check", config, "--lock", old_torch)
    assert out.exit_code == 1 and "toolchain.torch: 2.0.0 (lock)" in out.output  # the diff under the table

    other = write(
        tmp_path, {"model": str(src), "dtype": "float32", "max_seq_len": 64, "tokens_per_block": 16}, "o.yaml"
    )
    assert "build_config.max_seq_len: 128 (lock) -> 64 (now)" in run(other, lock=lock)["lock"][1]
    moved = _edit_lock(lock, lambda d: d["source"].update(fingerprint="sha256:" + "0" * 64))
    assert "source.fingerprint: sha256:000000000000... (lock)" in run(config, lock=moved)["lock"][1]
    tampered = _edit_lock(lock, lambda d: d["files"].update({"model.safetensors": "f" * 64}))
    status, message, _ = run(config, lock=tampered, level="full")["lock"]
    assert status == "fail" and "files.model.safetensors: ffffffffffff... (lock)" in message
    assert run(config, lock=tampered)["lock"][0] == "pass"  # below --level full only inputs are compared

    missing = cli("check", config, "--lock", tmp_path / "none.lock")
    assert missing.exit_code == 2 and "lock file" in missing.output and "does not exist" in missing.output


def test_full_holds_the_engine_to_expect(tmp_path, src):
    ref = write(tmp_path, {"model": str(src), "dtype": "float32", "max_seq_len": 256}, "ref.yaml")
    expect = {"reference": str(ref), "perplexity_delta_pct": 5, "top1_agreement": 0.9, "eval_tokens": 512}
    ok = write(tmp_path, {"model": str(src), "dtype": "bfloat16", "max_seq_len": 256, "checks": {"expect": expect}})
    too_strict = write(
        tmp_path,
        {
            "model": str(src),
            "dtype": "bfloat16",
            "max_seq_len": 256,
            "checks": {"expect": expect | {"max_perplexity": 1.5}},
        },
        "strict.yaml",
    )
    reports = run_checks([ok, too_strict], Options(level="full"))
    full = [next(r for r in rep.results if r.name == "full") for rep in reports]
    assert str(full[0].status) == "pass" and "vs the reference, top-1 agreement" in full[0].message
    assert str(full[1].status) == "fail" and "> max_perplexity 1.5" in full[1].message


def test_junit_report_of_a_run(tmp_path, src):
    good = write(tmp_path, {"model": str(src), "target": "cpu-16gb"}, "good.yaml")
    bad = write(tmp_path, {"model": str(src), "quant": "w4a16"}, "bad.yaml")
    out = cli("check", good, bad, "--junit", tmp_path / "r.xml")
    assert out.exit_code == 1, out.output
    root = ET.parse(tmp_path / "r.xml").getroot()
    cases = root.findall("testsuite/testcase")
    failures = root.findall("testsuite/testcase/failure")
    assert len(cases) == int(root.get("tests")) == 14
    assert len(failures) == int(root.get("failures")) == 1
    assert "in-features divisible by 128" in failures[0].get("message")
    assert len(root.findall("testsuite/testcase/skipped")) == int(root.get("skipped"))


@pytest.fixture
def one_thread():
    """Tiny builds run faster on one thread, especially on a busy shared CPU."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "quant", [None, "w8a16", "w4a16", "w4a16_awq", "w8a8_sq", "fp8", "fp8_pcpt", "w4a8_awq", "nvfp4"]
)
def test_memory_estimates_the_weights_a_build_writes(tmp_path, quant, one_thread):
    """The weight bytes (bits from each format's ModelOpt recipe) within 5% of the torch engine's file,
    whose weights stay quantized in memory."""
    from trtserve.build.builder import build_engine, plan_build
    from trtserve.build.config import BuildConfig
    from trtserve.check.memory import estimate
    from trtserve.check.targets import resolve_target

    src = make_hf_model(tmp_path / "hf", "llama", hidden_size=128, intermediate_size=256)
    cfg = BuildConfig(model=str(src), quant=quant, dtype="bfloat16", calib_size=2, calib_seq_len=16)
    est = estimate(plan_build(cfg), resolve_target("1GiB")).weights
    build_engine(cfg, tmp_path / "engine", quiet=True)
    real = (tmp_path / "engine" / "model.safetensors").stat().st_size
    assert 0.95 * real <= est <= 1.05 * real, (est, real)
