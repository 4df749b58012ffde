"""One test per mismatch between the adapter and real TensorRT-LLM found in issue 20 (fact sheet
section 10), run against the release fakes that behave as the real releases do. Each fails if its
mismatch comes back. (The pure halves of 3, 4 and 7 are in tests/unit/test_trtllm_capabilities.py.)"""

from __future__ import annotations

import json
import time

import pytest
from conftest import switch_release
from test_trtllm_engine import PROMPT, VOCAB, collect, req
from trtllm_fake import TENSORRT_RELEASES

from trtserve.backends.tensorrt_llm import build_plan
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError


# ---- 1. 1.0's PyTorch backend samples greedily unless enable_trtllm_sampler is set -------------------
def test_sampling_settings_take_effect_on_every_release(engine, fake_trtllm, release):
    [llm] = fake_trtllm.INSTANCES
    assert llm.kwargs.get("enable_trtllm_sampler") is (True if release == "1.0" else None)  # 1.1+ refuse the key
    sampled = [t for d in collect(engine, req(max_tokens=12, temperature=1.0, seed=3)) for t in d.token_ids]
    assert sampled != fake_trtllm.reference_greedy(PROMPT, 12, VOCAB)


def test_options_planned_for_one_release_load_on_another(fake_trtllm, release, tiny_llama, tmp_path):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    for planned in ("1.0", "main"):
        cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8, trtllm_version=planned)
        out = build_engine(cfg, tmp_path / planned, quiet=True).engine_dir
        engine = TrtllmEngine(out)  # pydantic extra="forbid": a wrong sampler key would raise here
        engine.shutdown()
    assert [bool(i.kwargs.get("enable_trtllm_sampler")) for i in fake_trtllm.INSTANCES] == [release == "1.0"] * 2


# ---- 2. greedy with n > 1 raises in TensorRT-LLM's SamplingParams -------------------------------------
def test_greedy_with_n_above_1_is_a_user_error_before_submission(engine, fake_trtllm):
    with pytest.raises(UserError, match=r"n=2 with greedy decoding .* TLLM_ALLOW_N_GREEDY_DECODING=1"):
        collect(engine, req(n=2, temperature=0.0))
    [llm] = fake_trtllm.INSTANCES
    assert llm._next_id == 0


def test_sampling_params_refusals_become_user_errors(engine, monkeypatch):
    monkeypatch.setattr(engine, "_allow_n_greedy", True)  # past our check: TensorRT-LLM's own refuses it
    with pytest.raises(UserError, match="TensorRT-LLM refused the request: Greedy decoding in the LLM API"):
        collect(engine, req(n=2, temperature=0.0))


def test_greedy_n_runs_where_the_server_allows_it(fake_trtllm, trtllm_engine_dir, monkeypatch):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    monkeypatch.setenv("TLLM_ALLOW_N_GREEDY_DECODING", "1")
    engine = TrtllmEngine(trtllm_engine_dir)
    try:
        deltas = collect(engine, req(n=2, temperature=0.0, max_tokens=4, ignore_eos=True))
    finally:
        engine.shutdown()
    seqs = [[t for d in deltas if d.index == i for t in d.token_ids] for i in (0, 1)]
    assert seqs[0] == seqs[1] == fake_trtllm.reference_greedy(PROMPT, 4, VOCAB)


# ---- 3. trtllm-serve --backend: trt on 1.0, tensorrt on 1.2, none on main ------------------------------
@pytest.mark.parametrize("backend", ["trtllm", "tensorrt"])
def test_trtllm_serve_line_parses_with_the_releases_own_cli(fake_trtllm, release, backend):
    from tensorrt_llm.commands.serve import main
    from trtllm_fake_core.serve_cli import PARSED

    from trtserve.backends.tensorrt_llm.capabilities import probe
    from trtserve.backends.tensorrt_llm.serve_plan import trtllm_serve_argv

    caps = probe(fake_trtllm)
    if backend == "tensorrt" and release == "main":
        with pytest.raises(UserError, match="has no TensorRT backend"):
            trtllm_serve_argv(caps, backend, "E/engine", "E/tokenizer", "E/o.yaml")
        return
    argv = trtllm_serve_argv(caps, backend, "E/m", "E/tokenizer", "E/o.yaml", tp_size=2)
    main.main(args=argv[1:], standalone_mode=False)
    assert (
        PARSED[-1]["backend"] == {"trtllm": "pytorch", "tensorrt": "trt" if release == "1.0" else "tensorrt"}[backend]
    )
    assert (PARSED[-1]["tp_size"], PARSED[-1]["extra_llm_api_options"]) == (2, "E/o.yaml")


# ---- 4. the TensorRT workflow: by what is installed, not by version number -----------------------------
@pytest.mark.parametrize("release", ["main"])
def test_tensorrt_build_is_refused_on_main(fake_gpu, tiny_llama, tmp_path):
    with pytest.raises(UserError, match=r"TensorRT-LLM 1.4.0rc1, release line main .* has no TensorRT backend"):
        build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "x", quiet=True)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("release", ["1.2"])
def test_tensorrt_dir_built_on_1_2_is_refused_on_main(fake_gpu, tiny_llama, tmp_path, monkeypatch):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True).engine_dir
    switch_release(monkeypatch, "main")
    with pytest.raises(
        UserError,
        match="holds TensorRT engines, but TensorRT-LLM 1.4.0rc1, release line main .* has no TensorRT backend",
    ):
        TrtllmEngine(out)


@pytest.mark.parametrize("release", ["1.2"])
def test_a_1_3_rc_that_still_has_the_tensorrt_backend_builds_and_runs(
    fake_gpu, fake_trtllm, tiny_llama, tmp_path, monkeypatch
):
    from trtserve.backends.tensorrt_llm import install
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    monkeypatch.setattr(fake_trtllm, "__version__", "1.3.0rc5")  # the 1.2 fake: _tensorrt_engine, trtllm-build
    rc = install.Target(**{**fake_gpu.to_dict(), "tensorrt_llm": "1.3.0rc5"})
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: rc)
    out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True).engine_dir
    engine = TrtllmEngine(out)
    try:
        assert engine.capabilities.line == "main" and engine.capabilities.tensorrt_engine
        assert sum(len(d.token_ids) for d in collect(engine, req(max_tokens=3, temperature=0.0))) == 3
    finally:
        engine.shutdown()


# ---- 5. 1.0's get_stats returns [] at once while idle: the poller must not spin ------------------------
def test_idle_stats_polling_waits(engine, fake_trtllm):
    [llm] = fake_trtllm.INSTANCES
    time.sleep(0.6)  # idle: STATS_POLL_S is 0.1 here, so about 6 calls; a spinning poller makes thousands
    assert llm.stats_calls <= 12


# ---- 6. Qwen checkpoints need qwen_type for trtllm-build -----------------------------------------------
@pytest.mark.parametrize("release", TENSORRT_RELEASES)
def test_qwen2_builds_with_trtllm_build(fake_gpu, tmp_path):
    from helpers import make_hf_model

    src = make_hf_model(tmp_path / "qwen", "qwen2")
    out = build_engine(BuildConfig(model=str(src), backend="tensorrt"), tmp_path / "q", quiet=True).engine_dir
    assert json.loads((out / "checkpoint" / "config.json").read_text())["qwen_type"] == "qwen2"


# ---- 8. --use_fp8_context_fmha defaults to enable in trtllm-build --------------------------------------
@pytest.mark.parametrize("release", TENSORRT_RELEASES)
def test_recorded_plugin_config_is_the_planned_one(fake_gpu, fake_trtllm, tiny_llama, tmp_path):
    from trtserve.build.builder import plan_build

    cfg = BuildConfig(model=str(tiny_llama), backend="tensorrt", tokens_per_block=16)
    out = build_engine(cfg, tmp_path / "t", quiet=True).engine_dir
    engine_config = json.loads((out / "engine" / "config.json").read_text())
    recorded = engine_config["build_config"]["plugin_config"]
    plan = plan_build(cfg)
    planned = build_plan.plugin_config(plan.limits, plan.quantization)
    keys = ("context_fmha", "paged_kv_cache", "remove_input_padding", "tokens_per_block", "use_paged_context_fmha")
    keys += ("use_fp8_context_fmha", "use_fused_mlp")
    assert {k: recorded[k] for k in keys} == {k: planned[k] for k in keys}
    assert engine_config["version"] == fake_trtllm.__version__
