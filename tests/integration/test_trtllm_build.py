"""`trtserve build --backend tensorrt|trtllm [--dry-run]` on a CPU machine without TensorRT-LLM."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
import yaml
from click.testing import CliRunner
from helpers import make_hf_model, write_gguf

from trtserve.backends.tensorrt_llm import build_plan, serve_plan
from trtserve.backends.tensorrt_llm.capabilities import planned
from trtserve.cli import main
from trtserve.engine.layout import EngineBuildConfig, PluginConfig
from trtserve.engine.manifest import verify_engine_dir


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("hf") / "m", "llama")


@pytest.fixture
def no_tensorrt_llm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # import raises ImportError


def build(tmp_path, *args):
    out = tmp_path / "out" / "engine"
    result = CliRunner().invoke(main, ["build", *map(str, args), "-o", str(out), "--quiet"])
    return result, out


def nothing_written(tmp_path) -> bool:
    return not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


LIMITS = dict(max_batch_size=8, max_input_len=255, max_seq_len=256, max_num_tokens=8192)


def test_dry_run_tensorrt_prints_the_trtllm_build_command(tmp_path, src, no_tensorrt_llm):
    result, out = build(tmp_path, src, "--backend", "tensorrt", "--dry-run", "--max-batch-size", "8", "--tp-size", "2")
    assert result.exit_code == 0, result.output
    limits = EngineBuildConfig(**LIMITS, plugin_config=PluginConfig(tokens_per_block=32))
    argv = build_plan.trtllm_build_argv(limits, None, f"{out}/checkpoint", f"{out}/engine", 2)
    lines = result.output.splitlines()
    assert "  " + shlex.join(argv) in lines
    assert any(
        ln.startswith(f"  trtllm-serve {out}/engine --backend tensorrt --tokenizer {out}/tokenizer") for ln in lines
    )
    assert '"max_input_len": 255' in result.output and '"use_fused_mlp": true' in result.output
    assert lines[-1] == "dry run: nothing was written"
    assert nothing_written(tmp_path)


def test_dry_run_tensorrt_plans_the_requested_quantization(tmp_path, src, no_tensorrt_llm):
    args = (
        "--backend",
        "tensorrt",
        "--dry-run",
        "--max-batch-size",
        "8",
        "--quant",
        "w8a16",
        "--kv-cache-quant",
        "int8",
    )
    result, out = build(tmp_path, src, *args)
    assert result.exit_code == 0, result.output
    quant = {"quant_algo": "W8A16", "kv_cache_quant_algo": "INT8"}
    limits = EngineBuildConfig(**LIMITS, plugin_config=PluginConfig(tokens_per_block=32))
    argv = build_plan.trtllm_build_argv(limits, quant, f"{out}/checkpoint", f"{out}/engine", 1)
    assert "  " + shlex.join(argv) in result.output.splitlines()
    assert f"quantization {json.dumps(quant)}" in result.output
    assert nothing_written(tmp_path)


def test_trtllm_refuses_quant_flags(tmp_path, src):
    result, _ = build(tmp_path, src, "--backend", "trtllm", "--quant", "fp8")
    assert result.exit_code == 2 and "--quant with --backend trtllm is not supported" in result.output
    assert nothing_written(tmp_path)


def test_dry_run_trtllm_prints_options_and_trtllm_serve(tmp_path, src, no_tensorrt_llm):
    result, out = build(tmp_path, src, "--backend", "trtllm", "--dry-run", "--max-batch-size", "8")
    assert result.exit_code == 0, result.output
    opts = f"{out}/llm_api_options.yaml"
    expected = serve_plan.trtllm_serve_argv(planned("1.2"), "trtllm", f"{out}/hf", f"{out}/tokenizer", opts, 1)
    assert "  " + shlex.join(expected) in result.output.splitlines()
    assert "enable_chunked_prefill: true" in result.output and "trtllm-build" not in result.output
    assert nothing_written(tmp_path)


def test_tensorrt_build_without_tensorrt_llm_says_how_to_install(tmp_path, src, no_tensorrt_llm):
    result, _ = build(tmp_path, src, "--backend", "tensorrt")
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: this needs TensorRT-LLM, which is not installed")
    assert 'pip install "trtserve[tensorrt]" --extra-index-url https://pypi.nvidia.com' in last
    assert nothing_written(tmp_path)


def test_trtllm_build_writes_hf_checkpoint_and_options(tmp_path, src, no_tensorrt_llm):
    result, out = build(tmp_path, src, "--backend", "trtllm", "--max-batch-size", "8", "--max-num-tokens", "512")
    assert result.exit_code == 0, result.output
    manifest = verify_engine_dir(out)
    assert manifest.backend == "trtllm" and manifest.target["tensorrt_llm"] is None
    assert {"hf/config.json", "hf/model.safetensors", "tokenizer/tokenizer.json", "llm_api_options.yaml"} <= set(
        manifest.files
    )
    assert (out / "hf" / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    limits = EngineBuildConfig(**{**LIMITS, "max_num_tokens": 512}, plugin_config=PluginConfig(tokens_per_block=32))
    expected = serve_plan.llm_api_options(limits, None, planned("1.2"))  # nothing installed: the default line
    assert yaml.safe_load((out / "llm_api_options.yaml").read_text()) == expected


def test_trtllm_reads_modelopt_quantization(tmp_path, src):
    q = tmp_path / "q"
    import shutil

    shutil.copytree(src, q)
    (q / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}})
    )
    result, out = build(tmp_path, q, "--backend", "trtllm", "--dry-run")
    assert result.exit_code == 0, result.output
    assert '"quant_algo": "FP8"' in result.output and "dtype: fp8" in result.output
    (q / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "INT8"}}))
    result, _ = build(tmp_path, q, "--backend", "trtllm", "--dry-run")
    assert result.exit_code == 2 and "INT8 is only a kv_cache_quant_algo" in result.output


def test_trtllm_needs_a_hf_dir(tmp_path, src):
    gguf = write_gguf(src, tmp_path / "m.gguf")
    result, _ = build(tmp_path, gguf, "--backend", "trtllm")
    assert result.exit_code == 2
    assert "is not a Hugging Face directory; give one, or use --backend tensorrt or torch" in result.output
    assert nothing_written(tmp_path)


def test_dry_run_is_for_tensorrt_llm_backends(tmp_path, src):
    result, _ = build(tmp_path, src, "--dry-run")
    assert result.exit_code == 2 and "add --backend tensorrt or --backend trtllm" in result.output


def test_run_without_tensorrt_llm_says_how_to_install(tmp_path, src, no_tensorrt_llm, monkeypatch):
    import trtserve.serve.server

    def must_not_serve(*args, **kwargs):
        raise AssertionError("served without TensorRT-LLM")

    monkeypatch.setattr(trtserve.serve.server, "serve", must_not_serve)
    _, out = build(tmp_path, src, "--backend", "trtllm")
    result = CliRunner().invoke(main, ["run", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: this needs TensorRT-LLM, which is not installed")
    assert "--extra-index-url https://pypi.nvidia.com" in result.output


def test_inspect_counts_the_hf_weights(tmp_path, src, no_tensorrt_llm):
    _, out = build(tmp_path, src, "--backend", "trtllm")
    result = CliRunner().invoke(main, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["backend"] == "trtllm" and info["weight_bytes"] == (src / "model.safetensors").stat().st_size


@pytest.mark.parametrize("backend", ["torch", "tensorrt"])
def test_one_planner_keeps_quantized_builds_in_16_bits(src, backend):
    """The planner's dtype rule is the same for every backend, and it changes none of its inputs."""
    from trtserve.build.builder import plan_build
    from trtserve.build.config import BuildConfig

    cfg = BuildConfig(model=str(src), backend=backend, quant="w8a16", kv_cache_quant="int8")
    before = cfg.model_dump()
    plan = plan_build(cfg)
    assert cfg.model_dump() == before
    assert (plan.config.dtype, plan.model.dtype, plan.model.quantization.quant_algo) == ("bfloat16", "bfloat16", None)
    assert plan.quantization == {"quant_algo": "W8A16", "kv_cache_quant_algo": "INT8"}
    assert plan_build(cfg.model_copy(update={"quant": None, "kv_cache_quant": None})).config.dtype == "float32"


@pytest.mark.parametrize(
    "release, sampler, trt_serve",
    [("1.0", True, "--backend trt "), ("1.1", False, "--backend tensorrt "), ("1.2", False, "--backend tensorrt ")],
)
def test_dry_run_plans_for_the_requested_release(tmp_path, src, no_tensorrt_llm, release, sampler, trt_serve):
    result, _ = build(tmp_path, src, "--backend", "trtllm", "--dry-run", "--trtllm-version", release)
    assert result.exit_code == 0, result.output
    assert f"planned for TensorRT-LLM release line {release} (from --trtllm-version {release}" in result.output
    assert ("enable_trtllm_sampler: true" in result.output) is sampler
    result, _ = build(tmp_path, src, "--backend", "tensorrt", "--dry-run", "--trtllm-version", release)
    assert result.exit_code == 0 and trt_serve in result.output and "--use_fp8_context_fmha disable" in result.output
    assert nothing_written(tmp_path)


def test_dry_run_for_main(tmp_path, src, no_tensorrt_llm):
    result, _ = build(tmp_path, src, "--backend", "trtllm", "--dry-run", "--trtllm-version", "main")
    assert result.exit_code == 0 and "release line main" in result.output and "sampler" not in result.output
    result, _ = build(tmp_path, src, "--backend", "tensorrt", "--dry-run", "--trtllm-version", "main")
    assert result.exit_code == 2
    assert (
        "release line main (from --trtllm-version main and the release table) has no TensorRT backend" in result.output
    )


def test_dry_run_without_tensorrt_llm_plans_for_the_default_release(tmp_path, src, no_tensorrt_llm):
    result, _ = build(tmp_path, src, "--backend", "trtllm", "--dry-run")
    assert (
        "planned for TensorRT-LLM release line 1.2 (the default, as TensorRT-LLM is not installed here" in result.output
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (("--trtllm-version", "1.0"), "--trtllm-version plans a TensorRT-LLM build; add --backend tensorrt"),
        (("--backend", "trtllm", "--trtllm-version", "0.19"), "TensorRT-LLM 0.19 is older than 1.0"),
        (("--backend", "trtllm", "--trtllm-version", "x"), "'x' is not a TensorRT-LLM version; give a release as X.Y"),
    ],
)
def test_bad_trtllm_version(tmp_path, src, args, message):
    result, _ = build(tmp_path, src, *args)
    assert result.exit_code == 2 and message in result.output
    assert nothing_written(tmp_path)


def test_trtllm_build_for_1_0_writes_its_sampler_switch(tmp_path, src, no_tensorrt_llm):
    result, out = build(tmp_path, src, "--backend", "trtllm", "--trtllm-version", "1.0")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((out / "llm_api_options.yaml").read_text())["enable_trtllm_sampler"] is True
    assert verify_engine_dir(out).build_config["trtllm_version"] == "1.0"
