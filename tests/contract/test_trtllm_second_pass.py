"""One test (or more) per mismatch of issue 39's second reading (fact sheet section 11), against the
release fakes, which now behave as upstream there. Each fails if its fix is undone."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
import yaml
from test_trtllm_engine import PROMPT, VOCAB, collect, req
from trtllm_fake import TENSORRT_RELEASES, release_root

from trtserve.backends.tensorrt_llm import build_plan
from trtserve.build.builder import build_engine, plan_build
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.engine.layout import EngineBuildConfig, PluginConfig
from trtserve.engine.run_config import RuntimeConfig


def open_engine(path, **run):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    return TrtllmEngine(path, RuntimeConfig(kv_cache_memory=1 << 20, **run))


@pytest.fixture
def trt_dir(fake_gpu, tiny_llama, tmp_path):
    """A --backend tensorrt engine dir whose max_num_tokens (16) is far below its max_seq_len (256)."""
    cfg = BuildConfig(model=str(tiny_llama), backend="tensorrt", max_batch_size=4, max_num_tokens=16)
    return build_engine(cfg, tmp_path / "trt", quiet=True).engine_dir


# ---- 1. the TensorRT path refuses logprobs without gather_generation_logits -----------------------------
@pytest.mark.parametrize("release", TENSORRT_RELEASES)
def test_logprobs_on_a_tensorrt_engine(trt_dir, fake_trtllm):
    options = yaml.safe_load((trt_dir / "llm_api_options.yaml").read_text())
    assert options["gather_generation_logits"] is True  # the TensorRT LLM refuses logprobs without it
    engine = open_engine(trt_dir)
    try:
        assert engine.info.capabilities.logprobs and engine.info.capabilities.max_top_logprobs > 0
        deltas = collect(engine, req(max_tokens=3, temperature=0.0, logprobs=2))
        lps = [lp for d in deltas for lp in d.logprobs]
        assert len(lps) == 3 and all(lp.rank == 1 and len(lp.top) == 2 for lp in lps)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("release", ["1.2"])
def test_an_engine_dir_without_gather_refuses_logprobs_in_one_sentence(fake_gpu, fake_trtllm, tiny_llama, tmp_path):
    from trtserve.backends.tensorrt_llm import serve_plan

    real = serve_plan.tensorrt_runtime_options
    older = pytest.MonkeyPatch()  # an engine dir written before the option was set
    older.setattr(serve_plan, "tensorrt_runtime_options", lambda *a: {**real(*a), "gather_generation_logits": False})
    try:
        out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True)
    finally:
        older.undo()
    engine = open_engine(out.engine_dir)
    try:
        assert not engine.info.capabilities.logprobs
        with pytest.raises(UserError, match=r"gather_generation_logits: true, which this engine dir's") as err:
            collect(engine, req(max_tokens=2, logprobs=0))
        assert "\n" not in str(err.value) and fake_trtllm.INSTANCES[0]._next_id == 0
    finally:
        engine.shutdown()


# ---- 2. prompts longer than max_num_tokens on the TensorRT path ---------------------------------------
@pytest.mark.parametrize("release", TENSORRT_RELEASES)
def test_a_prompt_longer_than_max_num_tokens_runs_with_chunked_context(trt_dir, fake_trtllm):
    engine = open_engine(trt_dir)
    try:
        [llm] = fake_trtllm.INSTANCES
        assert llm.llm_args.enable_chunked_prefill  # without it the fake (as trtGptModel.h) caps the input at 16
        prompt = [(7 * i + 3) % VOCAB for i in range(40)]
        got = [t for d in collect(engine, req(prompt=prompt, max_tokens=3, temperature=0.0)) for t in d.token_ids]
        assert got == fake_trtllm.reference_greedy(prompt, 3, VOCAB)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("release", ["1.2"])
def test_an_engine_without_paged_context_fmha_caps_prompts_at_max_num_tokens(
    fake_gpu, fake_trtllm, tiny_llama, tmp_path, monkeypatch
):
    """What trtllm-build left decides: here it turned paged context FMHA off (as for an INT8 KV cache), so the
    options YAML turns chunked context and KV reuse off (the fake, as upstream, refuses them otherwise) and a
    prompt above max_num_tokens gets a 400 naming the limit instead of failing inside TensorRT-LLM."""
    real = build_plan.trtllm_build_argv

    def without_paged(*a, **k):
        argv = real(*a, **k)
        i = argv.index("--use_paged_context_fmha")
        return [*argv[: i + 1], "disable", *argv[i + 2 :]]

    monkeypatch.setattr(build_plan, "trtllm_build_argv", without_paged)
    cfg = BuildConfig(model=str(tiny_llama), backend="tensorrt", max_batch_size=4, max_num_tokens=16)
    out = build_engine(cfg, tmp_path / "t", quiet=True).engine_dir
    options = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert options["enable_chunked_prefill"] is False and options["kv_cache_config"]["enable_block_reuse"] is False
    engine = open_engine(out)
    try:
        with pytest.raises(UserError, match="the prompt has 40 tokens, more than the 16 this TensorRT engine takes"):
            collect(engine, req(prompt=[3] * 40, max_tokens=2))
        assert len(collect(engine, req(prompt=[3] * 16, max_tokens=2, temperature=0.0))) >= 1
        assert fake_trtllm.INSTANCES[0]._next_id == 1
    finally:
        engine.shutdown()


def test_the_input_limit_without_paged_context_fmha():
    from trtserve.backends.tensorrt_llm.serve_plan import max_input_tokens, tensorrt_runtime_options

    limits = EngineBuildConfig(
        max_batch_size=4,
        max_input_len=255,
        max_seq_len=256,
        max_num_tokens=16,
        plugin_config=PluginConfig(tokens_per_block=32),
    )
    off = {"context_fmha": True, "use_paged_context_fmha": False}
    options = tensorrt_runtime_options(limits, plugin=off)
    assert options["enable_chunked_prefill"] is False and options["kv_cache_config"]["enable_block_reuse"] is False
    assert tensorrt_runtime_options(limits)["enable_chunked_prefill"] is True
    assert (max_input_tokens(256, 16, chunked=False), max_input_tokens(256, 16, chunked=True)) == (16, 255)


@pytest.mark.parametrize("release", ["1.2"])
def test_dry_run_and_serve_line_carry_chunked_context(fake_gpu, tiny_llama, tmp_path):
    from trtserve.build.builder import dry_run

    text = dry_run(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "x")
    assert "enable_chunked_prefill: true" in text and "--extra_llm_api_options" in text


# ---- 3. top-N logprobs per release on the PyTorch path -----------------------------------------------
@pytest.mark.parametrize("release", ["1.0", "1.1"])
def test_logprobs_the_release_cannot_return_are_refused(engine, fake_trtllm, release):
    if release == "1.0":  # the sampled token's logprob only
        with pytest.raises(UserError, match="returns the sampled token's logprob only"):
            collect(engine, req(max_tokens=2, temperature=0.0, logprobs=1))
        [lp] = collect(engine, req(max_tokens=1, temperature=0.0, logprobs=0))[0].logprobs
        assert lp.top == [] and lp.logprob == -0.5
    else:  # greedy: the sampled token is the top one, so nothing is missing
        with pytest.raises(UserError, match="may leave the sampled token out"):
            collect(engine, req(max_tokens=2, temperature=1.0, logprobs=2))
        lps = [lp for d in collect(engine, req(max_tokens=3, temperature=0.0, logprobs=2)) for lp in d.logprobs]
        assert all(lp.logprob == -0.5 and lp.top[0] == (lp.token_id, -0.5) for lp in lps)
    assert fake_trtllm.INSTANCES[0]._next_id == 1  # the refused ones never reached TensorRT-LLM


# ---- 4. trtllm-build rewrites the FMHA flags: the plan says what the engine will have ----------------
CASES = [
    (None, None),
    ("FP8", None),
    ("FP8", "FP8"),
    ("W8A16", "FP8"),
    ("W4A16_AWQ", "INT8"),
    ("W8A8_SQ_PER_CHANNEL", None),
    ("FP8_PER_CHANNEL_PER_TOKEN", "FP8"),
    ("W4A8_AWQ", None),
    ("NVFP4", "FP8"),
    ("NVFP4", None),
]


@pytest.mark.parametrize("release", ["1.2"])
@pytest.mark.parametrize("sm", ["9.0", "8.6"])
@pytest.mark.parametrize(("algo", "kv"), CASES)
def test_planned_plugin_flags_are_what_trtllm_build_writes(fake_trtllm, tmp_path, monkeypatch, algo, kv, sm):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    quantization = {"quant_algo": algo, "kv_cache_quant_algo": kv}
    config = {"architecture": "LlamaForCausalLM", "mapping": {"tp_size": 1}, "quantization": quantization}
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "rank0.safetensors").write_bytes(b"")
    limits = EngineBuildConfig(
        max_batch_size=4,
        max_input_len=255,
        max_seq_len=256,
        max_num_tokens=64,
        plugin_config=PluginConfig(tokens_per_block=32),
    )
    argv = build_plan.trtllm_build_argv(limits, quantization, str(ckpt), str(tmp_path / "out"), sm=sm)
    monkeypatch.setenv("FAKE_TRTLLM_SM", sm)
    subprocess.run([str(release_root("1.2") / "bin" / argv[0]), *argv[1:]], check=True, capture_output=True)
    built = json.loads((tmp_path / "out" / "config.json").read_text())["build_config"]["plugin_config"]
    planned = build_plan.plugin_config(limits, quantization, sm=sm)
    keys = ("context_fmha", "use_paged_context_fmha", "use_fp8_context_fmha")
    assert {k: built[k] for k in keys} == {k: planned[k] for k in keys}
    fp8_fmha = algo in ("FP8", "NVFP4") and sm == "9.0"
    assert planned["use_paged_context_fmha"] is (kv != "INT8" and (kv != "FP8" or fp8_fmha))


@pytest.mark.parametrize("release", ["1.2"])
def test_the_engine_dir_records_the_flags_the_engine_has(fake_gpu, tiny_llama, tmp_path, monkeypatch):
    """An unquantized build keeps paged context FMHA; the engine dir's config.json, engine/config.json and the
    options YAML agree (a quantized INT8-KV build needs ModelOpt: its rule is pinned by the test above)."""
    out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True).engine_dir
    ours = json.loads((out / "config.json").read_text())["build_config"]["plugin_config"]
    built = json.loads((out / "engine" / "config.json").read_text())["build_config"]["plugin_config"]
    assert ours["use_paged_context_fmha"] == built["use_paged_context_fmha"] is True
    from trtserve.build.strategies import STRATEGIES

    plan = plan_build(BuildConfig(model=str(tiny_llama), backend="tensorrt"))
    int8_kv = STRATEGIES["tensorrt"].built_limits(plan.limits, {"quant_algo": "W8A16", "kv_cache_quant_algo": "INT8"})
    assert int8_kv.plugin_config.use_paged_context_fmha is False


# ---- 5. Blackwell: trtllm-build refuses some formats on SM 10.x ---------------------------------------
@pytest.mark.parametrize("release", ["1.2"])
@pytest.mark.parametrize(
    ("quant", "kv", "refused"), [("w8a16", None, True), ("fp8", None, False), ("fp8", "int8", True)]
)
def test_blackwell_refuses_in_the_planner(fake_gpu, tiny_llama, monkeypatch, quant, kv, refused):
    from trtserve.backends.tensorrt_llm import install

    b200 = install.Target(**{**fake_gpu.to_dict(), "gpu_name": "NVIDIA B200", "sm": "10.0"})
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: b200)
    cfg = BuildConfig(model=str(tiny_llama), backend="tensorrt", quant=quant, kv_cache_quant=kv)
    if refused:
        with pytest.raises(UserError, match=r"on Blackwell GPUs \(SM 10.0"):
            plan_build(cfg)
    else:
        plan_build(cfg)


def test_blackwell_in_doctor_and_check_target(tiny_llama):
    from dataclasses import replace

    from trtserve.backends.tensorrt_llm.capabilities import planned
    from trtserve.backends.tensorrt_llm.host import BLACKWELL_WORKFLOW, HostReport, verdicts
    from trtserve.check.support import check_support
    from trtserve.check.targets import resolve_target

    caps = replace(planned("1.2.1"), version="1.2.1", how="installed, introspected")
    host = dict(caps=caps, import_error=None, tensorrt="10.11.0", trtllm_build="/usr/bin/trtllm-build", torch="2.9.0")
    for gpu, sm, refused in (("NVIDIA B200", "10.0", True), ("NVIDIA H100", "9.0", False)):
        answers = {v.workflow: v for v in verdicts(HostReport(**host, cuda="12.9", driver="580", gpu_name=gpu, sm=sm))}
        assert answers["build --backend tensorrt"].ok
        assert (BLACKWELL_WORKFLOW in answers) is refused
        if refused:
            assert not answers[BLACKWELL_WORKFLOW].ok and "SM 10.0" in answers[BLACKWELL_WORKFLOW].why
    b200 = resolve_target("b200-180gb")
    assert b200.sm == "10.0" and b200.device == "cuda"
    with pytest.raises(UserError, match=r"refuses W8A16 \(INT8/INT4 weight-only\) on Blackwell GPUs \(SM 10.0"):
        check_support(BuildConfig(model=str(tiny_llama), backend="tensorrt", quant="w8a16"), b200)
    check_support(BuildConfig(model=str(tiny_llama), backend="trtllm"), b200)  # the PyTorch path is not refused
    check_support(BuildConfig(model=str(tiny_llama), backend="tensorrt", quant="w8a16"), resolve_target("h100-80gb"))


@pytest.mark.parametrize("release", ["1.2"])
def test_blackwell_rules_match_the_fake_trtllm_build(fake_trtllm):
    from trtllm_fake_core import build_cli

    from trtserve.backends.tensorrt_llm.builder_rules import blackwell_problem
    from trtserve.backends.tensorrt_llm.quant import QUANT_ALGOS

    for algo in [None, *sorted(QUANT_ALGOS)]:
        for kv in (None, "FP8", "INT8", "NVFP4"):
            pc = {"context_fmha": True, "use_paged_context_fmha": True, "use_fp8_context_fmha": True}
            try:
                build_cli._builder_rules(pc, algo, kv, 100)
                refused = False
            except RuntimeError:
                refused = True
            assert (blackwell_problem(algo, kv, "10.0") is not None) is refused, (algo, kv)
            assert blackwell_problem(algo, kv, "12.0") is None and blackwell_problem(algo, kv, "9.0") is None


# ---- 6. stats under load: /metrics moves while a long request decodes ----------------------------------
@pytest.mark.parametrize("release", ["1.0", "1.1", "1.2"])
def test_stats_move_during_a_long_request(engine, fake_trtllm):
    """1.0-1.2 deliver iteration stats in bursts 0.2 s apart to one shared result that stays done after a
    wait times out (third pass, item 1): the steps /metrics reports must still move while one request runs."""
    [llm] = fake_trtllm.INSTANCES
    assert llm.idle_stats_at_once and llm.facts.stats_result == "shared"

    async def run():
        steps = []
        gen = engine.generate(req(max_tokens=240, temperature=0.0, ignore_eos=True))  # about 1 s of decode
        async for d in gen:
            steps.append(engine.stats().scheduler.steps)
            if d.finish_reason:
                break
        return steps

    steps = asyncio.run(run())
    during = [s for s in steps[: len(steps) * 4 // 5] if s]  # well before the request ends
    assert len(set(during)) >= 3, f"iteration stats froze while the request decoded: {sorted(set(steps))}"


# ---- 7. the checkpoint/ of every engine dir is what trtllm-build accepts ------------------------------
@pytest.mark.parametrize("release", ["1.2"])
def test_a_torch_engine_dirs_qwen2_checkpoint_builds_with_trtllm_build(fake_trtllm, tmp_path):
    from helpers import make_hf_model

    src = make_hf_model(tmp_path / "qwen", "qwen2")
    out = build_engine(BuildConfig(model=str(src)), tmp_path / "q", quiet=True).engine_dir  # --backend torch
    run = subprocess.run(
        [str(release_root("1.2") / "bin" / "trtllm-build"), "--checkpoint_dir", str(out / "checkpoint")]
        + ["--output_dir", str(tmp_path / "engine")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "engine" / "config.json").read_text())["pretrained_config"]["qwen_type"] == "qwen2"


# ---- the wave's features: KV host offload, sleep / wake-up -------------------------------------------
def test_kv_offload_maps_to_the_host_pool(fake_trtllm, trtllm_engine_dir):
    from trtserve.engine.kv_offload import KVOffloadConfig

    engine = open_engine(trtllm_engine_dir, kv_offload=KVOffloadConfig(bytes="2MiB"))
    try:
        kv = fake_trtllm.INSTANCES[0].llm_args.kv_cache_config
        onboard = getattr(kv, "onboard_blocks", True)  # main has no such field: blocks always come back
        assert (kv.host_cache_size, onboard, kv.enable_block_reuse) == (2 << 20, True, True)
    finally:
        engine.shutdown()
    with pytest.raises(UserError, match="kv_offload.path .* pinned host memory"):
        open_engine(trtllm_engine_dir, kv_offload=KVOffloadConfig(bytes="2MiB", path="/tmp/tier"))
    with pytest.raises(UserError, match="kv_offload needs KV block reuse"):
        open_engine(trtllm_engine_dir, kv_offload=KVOffloadConfig(bytes="2MiB"), enable_prefix_caching=False)


def test_sleep_and_wake_up_per_release(fake_trtllm, release, tiny_llama, tmp_path):
    from trtserve.engine.errors import EngineAsleepError, UnsupportedError

    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8, trtllm_version=release)
    engine = open_engine(build_engine(cfg, tmp_path / "e", quiet=True).engine_dir)
    try:
        [llm] = fake_trtllm.INSTANCES
        if release != "main":
            with pytest.raises(UnsupportedError, match="1.3 or later|no sleep") as err:
                asyncio.run(engine.sleep())
            assert "\n" not in str(err.value) and not llm.rpc_calls
            return

        async def run():
            gen = engine.generate(req(max_tokens=30, temperature=0.0, ignore_eos=True))
            first = await gen.__anext__()
            sleeping = asyncio.ensure_future(engine.sleep())  # waits for the request in flight
            rest = [d async for d in gen]
            await sleeping
            with pytest.raises(EngineAsleepError):
                engine.check(req())
            await engine.wake_up()
            return [first, *rest]

        deltas = asyncio.run(run())
        assert sum(len(d.token_ids) for d in deltas) == 30
        assert [m for m, _ in llm.rpc_calls] == ["sleep", "wakeup"]
        assert len(llm.rpc_calls[0][1][0]) == 3  # every ExecutorMemoryType
        got = [t for d in collect(engine, req(max_tokens=4, temperature=0.0)) for t in d.token_ids]
        assert got == fake_trtllm.reference_greedy(PROMPT, 4, VOCAB)
    finally:
        engine.shutdown()


def test_the_fakes_freeze_get_stats_under_load_where_upstream_does(fake_trtllm, trtllm_engine_dir, release):
    """The fake's own behaviour (facts.py `stats`): a blocking release's get_stats returns only after the load."""
    llm = fake_trtllm.LLM(model=str(trtllm_engine_dir / "hf"))
    sp = fake_trtllm.SamplingParams(max_tokens=60, top_k=1, ignore_eos=True)

    async def run():
        result = llm.generate_async([5, 6], sampling_params=sp, streaming=True)
        await asyncio.sleep(0.05)
        got = await asyncio.to_thread(llm.get_stats, 0.5)
        async for _ in result:
            pass
        return got

    got = asyncio.run(run())
    last = 59  # 60 tokens, one per iteration
    assert got and (got[-1]["iter"] == last) is llm.idle_stats_at_once  # blocking: up to the last iteration


def test_guided_decoding_reaches_trtllm_through_its_exported_params(fake_trtllm, trtllm_engine_dir, monkeypatch):
    """GuidedDecodingParams comes from tensorrt_llm.llmapi (every release); the LLM needs its guided backend."""
    from trtserve.backends.tensorrt_llm import engine as engine_module
    from trtserve.engine.sampling import GuidedDecoding

    real = engine_module.read_options
    monkeypatch.setattr(engine_module, "read_options", lambda p: {**real(p), "guided_decoding_backend": "xgrammar"})
    engine = open_engine(trtllm_engine_dir)
    try:
        assert engine.info.capabilities.guided_decoding
        deltas = collect(engine, req(max_tokens=3, temperature=0.0, guided=GuidedDecoding(kind="regex", spec="[0-9]+")))
        assert sum(len(d.token_ids) for d in deltas) == 3
        params = fake_trtllm.INSTANCES[0].last_params
        assert type(params.guided_decoding) is fake_trtllm.llmapi.GuidedDecodingParams
        assert params.guided_decoding.regex == "[0-9]+"
    finally:
        engine.shutdown()


def test_the_options_yaml_as_written_is_what_the_releases_llm_args_take(fake_trtllm, release, tiny_llama, tmp_path):
    """trtllm-serve --extra_llm_api_options and Dynamo's `python -m dynamo.trtllm` read the YAML as it is
    (no fitting): planned for a release, it validates against that release's own LLM args."""
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs

    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8, trtllm_version=release)
    out = build_engine(cfg, tmp_path / "m", quiet=True).engine_dir
    options = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    args = TorchLlmArgs(model=str(out / "hf"), **options)
    assert args.enable_chunked_prefill and args.kv_cache_config.enable_block_reuse
    if release != "main":
        from tensorrt_llm.llmapi.llm_args import TrtLlmArgs

        from trtserve.backends.tensorrt_llm.serve_plan import tensorrt_runtime_options

        plan = plan_build(BuildConfig(model=str(tiny_llama), backend="tensorrt"))
        trt = TrtLlmArgs(model="engine", **tensorrt_runtime_options(plan.limits))
        assert trt.gather_generation_logits and trt.enable_chunked_prefill
