"""The capability probe against each release fake, the fakes' release behaviours themselves (so a fake
that drifts from its release is caught here), and `trtserve doctor` on a host with a fake installed."""

from __future__ import annotations

import asyncio
import time

import pydantic
import pytest
from trtllm_fake import RELEASES, TENSORRT_RELEASES

from trtserve.backends.tensorrt_llm.capabilities import SAMPLER_SWITCH, probe

EXPECTED = {  # release -> (line, TensorRT backend, trtllm-serve --backend values)
    "1.0": ("1.0", True, ("pytorch", "trt", "_autodeploy")),
    "1.1": ("1.1", True, ("pytorch", "tensorrt", "_autodeploy")),
    "1.2": ("1.2", True, ("pytorch", "tensorrt", "_autodeploy", "trt")),
    "main": ("main", False, ("pytorch", "_autodeploy")),
}


def test_probe_introspects_the_release(fake_trtllm, release):
    caps = probe(fake_trtllm, serve_cli=True)
    line, tensorrt, serve = EXPECTED[release]
    assert probe(fake_trtllm).serve_backends == serve  # the table's answer, without importing the CLI
    assert (caps.line, caps.tensorrt_engine, caps.trtllm_build, caps.serve_backends) == (
        line,
        tensorrt,
        tensorrt,
        serve,
    )
    assert caps.introspected and "attn_backend" in caps.torch_args  # read from the args model, not the table
    assert (SAMPLER_SWITCH in caps.torch_args) is (release == "1.0")
    assert ("sampler_type" in caps.torch_args) is (release in ("1.1", "1.2"))


def test_llm_args_forbid_unknown_keys(fake_trtllm, trtllm_engine_dir):
    with pytest.raises(pydantic.ValidationError, match="extra_forbidden|Extra inputs are not permitted"):
        fake_trtllm.LLM(model=str(trtllm_engine_dir / "hf"), no_such_option=True)


def _generate(llm, sp) -> list[int]:
    async def run():
        result = llm.generate_async([5, 17, 42], sampling_params=sp, streaming=True)
        async for _ in result:
            pass
        return result.outputs[0].token_ids

    return asyncio.run(run())


@pytest.mark.parametrize("release", ["1.0"])
def test_the_1_0_fake_decodes_greedily_without_the_sampler_switch(fake_trtllm, trtllm_engine_dir):
    sp = fake_trtllm.SamplingParams(max_tokens=8, temperature=1.0, top_p=1.0, seed=3)
    greedy = fake_trtllm.reference_greedy([5, 17, 42], 8, 320)
    plain = fake_trtllm.LLM(model=str(trtllm_engine_dir / "hf"))
    switched = fake_trtllm.LLM(model=str(trtllm_engine_dir / "hf"), **{SAMPLER_SWITCH: True})
    assert _generate(plain, sp) == greedy and _generate(switched, sp) != greedy


@pytest.mark.parametrize("release", RELEASES)
def test_greedy_n_and_ranges_in_sampling_params(fake_trtllm, release, monkeypatch):
    with pytest.raises(ValueError, match="Greedy decoding in the LLM API does not allow multiple returns"):
        fake_trtllm.SamplingParams(n=2, top_k=1)
    monkeypatch.setenv("TLLM_ALLOW_N_GREEDY_DECODING", "1")
    fake_trtllm.SamplingParams(n=2, top_k=1)
    if release == "1.0":
        fake_trtllm.SamplingParams(top_p=1.5)  # 1.0 left ranges to the C++ side
    else:
        with pytest.raises(ValueError, match="top_p"):
            fake_trtllm.SamplingParams(top_p=1.5)


@pytest.mark.parametrize("release", TENSORRT_RELEASES)
def test_tensorrt_engine_llm_needs_what_trtllm_build_writes(fake_trtllm, trtllm_engine_dir):
    from tensorrt_llm._tensorrt_engine import LLM

    with pytest.raises(ValueError, match="lacks build_config.plugin_config|not a TensorRT-LLM engine dir"):
        LLM(model=str(trtllm_engine_dir / "hf"))  # an HF dir is not an engine dir


@pytest.mark.parametrize("release", ["main"])
def test_main_has_no_tensorrt_backend(fake_trtllm):
    import importlib.util

    assert importlib.util.find_spec("tensorrt_llm._tensorrt_engine") is None
    assert importlib.util.find_spec("tensorrt_llm.commands.build") is None
    with pytest.raises(ValueError, match="TensorRT backend has been removed"):
        fake_trtllm.LLM(model="unused", backend="tensorrt")


def test_doctor_with_the_release_installed(fake_trtllm, release, tmp_path, monkeypatch):
    """A dist-info beside the fake makes it 'installed': doctor reads the metadata, then imports it."""
    from trtserve.backends.tensorrt_llm import host, install

    info = tmp_path / f"tensorrt_llm-{fake_trtllm.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {fake_trtllm.__version__}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    gpu = install.Target(
        tensorrt_llm=fake_trtllm.__version__, tensorrt="10.11.0", cuda="12.9", gpu_name="H100", sm="9.0"
    )
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: gpu)
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}")
    report = host.gather()
    answers = {v.workflow: v.ok for v in host.verdicts(report)}
    assert report.caps.introspected and report.caps.version == fake_trtllm.__version__
    assert answers["run --backend trtllm engine dirs"]
    assert answers["build --backend tensorrt"] is answers["run --backend tensorrt engine dirs"] is (release != "main")


def test_the_gpu_scripts_checks_pass_on_every_fake(engine, monkeypatch):
    """tests/gpu/check_trtllm.py has not run on a GPU here; its engine checks at least run on the fakes
    (greedy-vs-HF, builds on the GPU and the server check need the real thing)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parents[1] / "gpu" / "check_trtllm.py"
    spec = importlib.util.spec_from_file_location("check_trtllm", path)
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the repo and tests/ in front
    monkeypatch.setitem(sys.modules, "check_trtllm", script)
    spec.loader.exec_module(script)
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: real_sleep(0.5 if s >= 3 else s))  # a shorter idle wait
    checks = (script.check_sampling, script.check_n, script.check_abort, script.check_stats)
    for check in (*checks, script.check_stats_under_load, script.check_logprobs, script.check_long_prompt):
        assert check(engine)
    assert script.check_serve_line(engine, "trtllm").startswith("trtllm-serve M --backend pytorch")
