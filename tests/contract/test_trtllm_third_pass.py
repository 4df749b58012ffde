"""The TensorRT-LLM adapter, third pass (issue 54): eight places where upstream differed from the adapter,
each against a fake that behaves as upstream does at that spot (fake_trtllm/, facts.py). TensorRT-LLM
itself does not run here: every test is against the per-release fakes."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_trtllm_engine import req

from trtserve.engine.errors import UserError


# ---- 1. /metrics during a long decode on 1.0-1.2: one shared stats result, bursts 0.2 s apart ----------
@pytest.mark.parametrize("release", ["1.0", "1.1", "1.2"])
def test_the_fake_stats_result_is_shared_and_stays_done(fake_trtllm, trtllm_engine_dir):
    """The fake as upstream's IterationResult: nothing (and a warning) before the first request; after a wait
    times out, nothing until the next generate_async, though iterations are queued."""
    llm = fake_trtllm.LLM(model=str(trtllm_engine_dir / "hf"))
    sp = fake_trtllm.SamplingParams(max_tokens=40, top_k=1, ignore_eos=True)

    async def run():
        before = [s async for s in llm.get_stats_async(timeout=0.3)]
        first = llm.generate_async([5, 6], sampling_params=sp, streaming=True)
        early = [s async for s in llm.get_stats_async(timeout=0.05)]  # ends before the first burst: done
        await asyncio.sleep(0.3)
        stuck = [s async for s in llm.get_stats_async(timeout=0.3)]  # done: nothing, though a burst came
        async for _ in first:
            pass
        second = llm.generate_async([5, 6], sampling_params=sp, streaming=True)
        moved = [s async for s in llm.get_stats_async(timeout=0.5)]
        async for _ in second:
            pass
        return before, early, stuck, moved

    before, early, stuck, moved = asyncio.run(run())
    assert before == [] and llm.not_ready_warnings == 1
    assert early == [] and stuck == []
    assert [s["iter"] for s in moved][:3] == [0, 1, 2]  # what was queued meanwhile, in order


@pytest.mark.parametrize("release", ["1.0", "1.2", "main"])
def test_the_poller_does_not_ask_before_the_first_request(engine, fake_trtllm):
    """Upstream prints "statistics are not available yet" on every call before the first request."""
    [llm] = fake_trtllm.INSTANCES
    time.sleep(0.5)  # five idle poll intervals here
    assert llm.stats_calls == 0 and llm.not_ready_warnings == 0
    asyncio.run(_drain(engine.generate(req(max_tokens=4, temperature=0.0))))
    deadline = time.monotonic() + 10  # a bound on the wait, not a timing assertion
    while engine.stats().scheduler.steps < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.stats().scheduler.steps >= 4 and llm.not_ready_warnings == 0


async def _drain(gen) -> list:
    return [d async for d in gen]


def open_engine(path, **run):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine
    from trtserve.engine.run_config import RuntimeConfig

    return TrtllmEngine(path, RuntimeConfig(kv_cache_memory=1 << 20, **run))


# ---- 2. kv_offload on main: KvCacheConfig (StrictBaseModel) lost onboard_blocks in PR #12449 -----------
def test_kv_offload_opens_on_every_release(fake_trtllm, release, trtllm_engine_dir):
    from trtserve.engine.kv_offload import KVOffloadConfig

    engine = open_engine(trtllm_engine_dir, kv_offload=KVOffloadConfig(bytes="2MiB"))
    try:
        [llm] = fake_trtllm.INSTANCES
        assert llm.llm_args.kv_cache_config.host_cache_size == 2 << 20
        assert "onboard_blocks" not in llm.llm_args.kv_cache_config.model_fields_set  # left to its default
        assert ("onboard_blocks" in type(llm.llm_args.kv_cache_config).model_fields) is (release != "main")
    finally:
        engine.shutdown()


@pytest.mark.parametrize("release", ["main"])
def test_a_kv_cache_field_the_release_lacks_is_refused_in_one_sentence(fake_trtllm):
    """An options YAML an older trtserve wrote (kv_offload's onboard_blocks) meets main's KvCacheConfig."""
    from trtserve.backends.tensorrt_llm.capabilities import probe
    from trtserve.backends.tensorrt_llm.serve_plan import fit_options

    caps = probe(fake_trtllm)
    assert caps.kv_cache_fields is not None and "onboard_blocks" not in caps.kv_cache_fields
    options = {"kv_cache_config": {"enable_block_reuse": True, "host_cache_size": 1 << 20, "onboard_blocks": True}}
    with pytest.raises(UserError, match=r"sets kv_cache_config.onboard_blocks, which .* main .* does not have") as e:
        fit_options(options, "trtllm", caps, "llm_api_options.yaml")
    assert "\n" not in str(e.value)


# ---- 7. --tokens-per-block on --backend trtllm: kv_cache_config.tokens_per_block where it exists --------
VERSION = {"1.0": "1.0", "1.1": "1.1", "1.2": "1.2", "main": "main"}


def test_tokens_per_block_reaches_the_pytorch_kv_manager(fake_trtllm, release, tiny_llama, tmp_path):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", tokens_per_block=16, trtllm_version=VERSION[release])
    if release == "1.0":  # its KvCacheConfig has no tokens_per_block: TensorRT-LLM would run 32-token blocks
        with pytest.raises(
            UserError, match=r"--tokens-per-block 16 cannot be applied on TensorRT-LLM release line 1.0"
        ):
            build_engine(cfg, tmp_path / "m", quiet=True)
        assert not (tmp_path / "m").exists()
        return
    out = build_engine(cfg, tmp_path / "m", quiet=True).engine_dir
    engine = open_engine(out)
    try:
        [llm] = fake_trtllm.INSTANCES
        assert llm.tokens_per_block == 16  # what the engine dir records, and what Dynamo's router is told
    finally:
        engine.shutdown()


@pytest.mark.parametrize("release", ["1.0"])
def test_a_block_size_planned_for_a_later_release_is_refused_on_1_0(fake_trtllm, tiny_llama, tmp_path):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", tokens_per_block=16, trtllm_version="1.2")
    out = build_engine(cfg, tmp_path / "m", quiet=True).engine_dir
    with pytest.raises(UserError, match=r"kv_cache_config.tokens_per_block 16, which TensorRT-LLM 1.0.0") as e:
        open_engine(out)
    assert "\n" not in str(e.value)


def test_the_default_block_size_writes_nothing(tiny_llama, tmp_path):
    """32 is every release's default: the YAML stays loadable by 1.0."""
    import yaml

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = build_engine(BuildConfig(model=str(tiny_llama), backend="trtllm"), tmp_path / "m", quiet=True).engine_dir
    assert "tokens_per_block" not in yaml.safe_load((out / "llm_api_options.yaml").read_text())["kv_cache_config"]


# ---- 3. Blackwell: W4A8_AWQ is INT4 weight-only in mode.py, so trtllm-build refuses it on SM 10.x ------
@pytest.mark.parametrize("release", ["1.2"])
def test_w4a8_awq_is_refused_on_blackwell_and_never_recommended(fake_trtllm):
    from trtllm_fake_core import build_cli, quant_mode

    from trtserve.backends.tensorrt_llm.builder_rules import BLACKWELL_FORMATS, blackwell_problem

    assert quant_mode.is_int4_weight_only(quant_mode.from_quant_algo("W4A8_AWQ", None))  # as mode.py has it
    flags = {"context_fmha": True, "use_paged_context_fmha": True, "use_fp8_context_fmha": True}
    with pytest.raises(RuntimeError, match="INT8/INT4 quantization is not supported on SM>=100"):
        build_cli._builder_rules(dict(flags), "W4A8_AWQ", None, 100)
    problem = blackwell_problem("W4A8_AWQ", None, "10.0")
    assert problem is not None and "W4A8_AWQ (INT8/INT4 weight-only)" in problem
    advice = blackwell_problem("W8A16", None, "10.0").split("; use ")[1]
    assert "W4A8_AWQ" not in advice and all(f in advice for f in BLACKWELL_FORMATS)
    for fmt in BLACKWELL_FORMATS:  # what the sentence recommends, trtllm-build takes there
        build_cli._builder_rules(dict(flags), fmt, "FP8", 100)
        build_cli._builder_rules(dict(flags), fmt, None, 100)


# ---- 4. a draft-model speculative_config as each release's own YAML reader takes it -------------------
def test_trtllm_serve_reads_the_draft_model_yaml_on_every_release(
    fake_trtllm, release, tiny_llama, trtllm_engine_dir, tmp_path
):
    """What the printed trtllm-serve line and Dynamo's worker do with the options file: the release's
    update_llm_args_with_extra_options (from_dict's "DraftTarget" on 1.0-1.1, the union's "Draft_Target" after)."""
    from tensorrt_llm.llmapi import llm_args

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.speculative import SpeculativeConfig

    spec = SpeculativeConfig(method="draft_model", num_speculative_tokens=2, draft_engine_dir=trtllm_engine_dir)
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", speculative=spec, trtllm_version=VERSION[release])
    out = build_engine(cfg, tmp_path / "m", quiet=True).engine_dir
    args = llm_args.update_llm_args_with_extra_options({}, str(out / "llm_api_options.yaml"))
    assert type(args["speculative_config"]) is fake_trtllm.llmapi.DraftTargetDecodingConfig
    llm_args.TorchLlmArgs(model=str(out / "hf"), **args)  # and the PyTorch LLM's args take it
    engine = open_engine(out)  # trtserve's own reading takes it too
    engine.shutdown()


# ---- 5. sleep on main with tensor_parallel_size > 1: base_worker raises NotImplementedError ------------
@pytest.mark.parametrize("release", ["main"])
def test_sleep_with_tensor_parallel_is_refused_in_one_sentence(fake_trtllm, tiny_llama, tmp_path):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.errors import UnsupportedError

    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", tp_size=2, trtllm_version="main")
    engine = open_engine(build_engine(cfg, tmp_path / "m", quiet=True).engine_dir)
    try:
        [llm] = fake_trtllm.INSTANCES
        assert llm.tensor_parallel_size == 2 and llm.llm_args.sleep_config is not None
        with pytest.raises(UnsupportedError, match="needs a single GPU .* tensor-parallel on 2") as e:
            asyncio.run(engine.sleep())
        assert "\n" not in str(e.value) and llm.rpc_calls == []
        assert [
            t for d in asyncio.run(_drain(engine.generate(req(max_tokens=3, temperature=0.0)))) for t in d.token_ids
        ]
    finally:
        engine.shutdown()


# ---- 8. Dynamo dry run: a TensorRT-engine dir has no hf/ for Dynamo's worker ---------------------------
@pytest.mark.parametrize("release", ["1.2"])
def test_dynamo_dry_run_refuses_a_tensorrt_engine_dir(fake_gpu, tiny_llama, tmp_path):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.dynamo.trtllm import dry_run_lines

    out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True).engine_dir
    assert not (out / "hf").exists()  # what the worker line pointed --model at
    with pytest.raises(UserError, match="holds TensorRT engines, which Dynamo's TensorRT-LLM worker") as e:
        dry_run_lines(out, "tensorrt", "dynamo", "m", 32)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("line", "spelt"), [("1.0", "default"), ("1.2", "DEFAULT"), ("main", "DEFAULT")])
def test_the_cache_transceiver_backend_is_spelt_as_the_release_takes_it(trtllm_engine_dir, monkeypatch, line, spelt):
    """1.0's CacheTransceiverConfig.backend is Literal["default", ...]; 1.1 on upper case."""
    import json
    import shlex

    from click.testing import CliRunner

    from trtserve.backends.tensorrt_llm import capabilities
    from trtserve.cli.dynamo import command

    monkeypatch.setattr(capabilities, "installed", lambda: capabilities.planned(line))
    result = CliRunner().invoke(command, [str(trtllm_engine_dir), "--dry-run"])
    assert result.exit_code == 0, result.output
    prefill = shlex.split(next(x for x in result.output.splitlines() if "--disaggregation-mode prefill" in x))
    overrides = json.loads(prefill[prefill.index("--override-engine-args") + 1])
    assert overrides["cache_transceiver_config"] == {"backend": spelt}
    assert prefill[prefill.index("--model") + 1] == str(trtllm_engine_dir / "hf")
