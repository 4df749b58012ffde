"""`--backend tensorrt` end to end with the fake: trtllm-build orchestration, the engine dir, the
manifest's toolchain and GPU, loading through the TensorRT-engine LLM, and every mismatch refused.
Runs against the fakes of the releases that have the TensorRT backend (1.0, 1.2); main's refusal
is in test_trtllm_mismatches.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from trtllm_fake import TENSORRT_RELEASES

from trtserve.backends.tensorrt_llm import install
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.engine.manifest import verify_engine_dir
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.sampling import SamplingParams


@pytest.fixture(params=TENSORRT_RELEASES)
def release(request) -> str:
    return request.param


@pytest.fixture
def trt_dir(fake_gpu, tiny_llama, tmp_path):
    cfg = BuildConfig(model=str(tiny_llama), backend="tensorrt", max_batch_size=8, tp_size=2, tokens_per_block=16)
    return build_engine(cfg, tmp_path / "trt", quiet=True).engine_dir


def test_engine_dir_layout_and_manifest(trt_dir, fake_gpu):
    m = verify_engine_dir(trt_dir)
    assert m.backend == "tensorrt" and m.target == fake_gpu.to_dict()
    names = set(m.files)
    assert {"engine/config.json", "engine/rank0.engine", "engine/rank1.engine"} <= names
    assert {"checkpoint/config.json", "checkpoint/rank0.safetensors", "checkpoint/rank1.safetensors"} <= names
    assert {"tokenizer/tokenizer.json", "llm_api_options.yaml", "config.json"} <= names
    assert "model.safetensors" not in names and not list(trt_dir.parent.glob(".trt.*"))
    build = json.loads((trt_dir / "engine" / "config.json").read_text())["build_config"]
    plugins = build["plugin_config"]  # nested, as trtllm-build records it
    assert (build["max_batch_size"], plugins["tokens_per_block"], build["kv_cache_type"]) == (8, 16, "PAGED")


def test_serves_through_the_tensorrt_engine_llm(trt_dir, fake_trtllm):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    engine = TrtllmEngine(trt_dir)
    try:
        [llm] = fake_trtllm.INSTANCES
        assert llm.model == str(trt_dir / "engine")
        assert set(llm.kwargs) == {"kv_cache_config", "enable_chunked_prefill", "gather_generation_logits"}
        assert llm.kwargs["enable_chunked_prefill"] and llm.kwargs["kv_cache_config"].enable_block_reuse
        assert llm.tensor_parallel_size == 2

        async def run():
            req = GenerateRequest([5, 6, 7], SamplingParams(max_tokens=4, temperature=0.0))
            return [d async for d in engine.generate(req)]

        deltas = asyncio.run(run())
        assert sum(len(d.token_ids) for d in deltas) == 4 and deltas[-1].finish_reason == "length"
    finally:
        engine.shutdown()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sm": "8.0"}, "was built for GPU compute capability (SM) 9.0 but this host has 8.0"),
        ({"tensorrt": "10.10.0"}, "was built for TensorRT 10.9.0.34 but this host has 10.10.0"),
        ({"tensorrt_llm": "1.0.9"}, "was built for TensorRT-LLM {built} but this host has 1.0.9"),
    ],
)
def test_mismatch_is_refused_by_trtserve_run(trt_dir, fake_gpu, monkeypatch, change, message):
    message = message.format(built=fake_gpu.tensorrt_llm)
    from click.testing import CliRunner

    import trtserve.serve.server
    from trtserve.cli import main

    other = install.Target(**{**fake_gpu.to_dict(), **change})
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: other)
    monkeypatch.setattr(trtserve.serve.server, "serve", _must_not_serve)
    result = CliRunner().invoke(main, ["run", str(trt_dir)])
    assert result.exit_code == 2
    assert message in result.output
    assert f"trtserve build {json.loads((trt_dir / 'manifest.json').read_text())['source']['path']} -o {trt_dir}" in (
        result.output
    )


def _must_not_serve(*args, **kwargs):
    raise AssertionError("the compatibility check let a mismatched engine through to serving")


def test_trtllm_build_failure_leaves_nothing(fake_gpu, tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent-bin-only")
    with pytest.raises(UserError, match="trtllm-build is not on PATH"):
        build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "x", quiet=True)
    assert not list(tmp_path.iterdir())


def test_no_gpu_no_tensorrt_build(fake_gpu, tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: install.Target(tensorrt_llm="1.0.0"))
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "x", quiet=True)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("release", ["1.2"])
def test_a_real_build_cannot_plan_for_another_release(fake_gpu, tiny_llama, tmp_path):
    cfg = BuildConfig(model=str(tiny_llama), backend="tensorrt", trtllm_version="1.0")
    with pytest.raises(UserError, match=r"--trtllm-version 1.0 plans for release line 1.0, but this build runs"):
        build_engine(cfg, tmp_path / "x", quiet=True)
    assert not list(tmp_path.iterdir())
