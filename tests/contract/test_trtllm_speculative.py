"""Speculative decoding on TensorRT-LLM over the per-release fakes: the `speculative` option as the LLM
argument `speculative_config` (each release's own NGram / DraftTarget decoding config classes, which
refuse unknown fields), in the options YAML, the dry run and the LLM; a YAML planned for one release
run on another; and the refusals (TensorRT engines, a torch build, a request's opt-out, what has no
TensorRT-LLM counterpart), each one sentence before anything reaches TensorRT-LLM."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from trtserve.build.builder import build_engine, dry_run
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.speculative import SpeculativeConfig
from trtserve.engine.stats import SpecCounts

VOCAB = 320
PROMPT = [5, 17, 42, 99, 7]
NGRAM = SpeculativeConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_max=3)
# what our ngram proposer does, in NGramDecodingConfig's terms: per-request pool, newest match
NGRAM_OPTIONS = {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3}
NGRAM_OPTIONS |= {"is_keep_all": True, "is_use_oldest": False, "is_public_pool": False}
# the draft checkpoint's field, by release line (llm_args.py DecodingBaseConfig)
DRAFT_FIELD = {"1.0": "speculative_model_dir", "1.1": "speculative_model_dir", "1.2": "speculative_model"}
DRAFT_FIELD["main"] = "speculative_model"


def draft(engine_dir) -> SpeculativeConfig:
    return SpeculativeConfig(method="draft_model", num_speculative_tokens=2, draft_engine_dir=engine_dir)


def planned_options(cfg: BuildConfig, out) -> tuple[dict, str]:
    text = dry_run(cfg, out)
    section = text.split("LLM-API options (llm_api_options.yaml):\n")[1].split("equivalent commands:")[0]
    return yaml.safe_load(section.split("\n  #")[0]), text


def open_engine(path, **run):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    return TrtllmEngine(path, RuntimeConfig(kv_cache_memory=1 << 20, **run))


def greedy(engine, **request) -> list[int]:
    async def run():
        r = GenerateRequest(list(PROMPT), SamplingParams(max_tokens=6, temperature=0.0), RequestOptions(**request))
        return [t for d in [d async for d in engine.generate(r)] for t in d.token_ids]

    return asyncio.run(run())


# ---- the plan: options YAML and dry run ---------------------------------------------------------------
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2", "main"])
def test_dry_run_maps_ngram_per_release(tiny_llama, tmp_path, version):
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", speculative=NGRAM, trtllm_version=version)
    options, text = planned_options(cfg, tmp_path / "m")
    concurrency = {} if version == "1.0" else {"max_concurrency": 8}  # 1.0's DecodingBaseConfig has none
    assert options["speculative_config"] == NGRAM_OPTIONS | concurrency
    assert "speculative.min_acceptance 0.1 is not applied" in text
    assert ("TensorRT-LLM 1.0 has no max_concurrency" in text) == (version == "1.0")


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2", "main"])
def test_dry_run_maps_a_draft_model_to_its_hf_checkpoint(tiny_llama, trtllm_engine_dir, tmp_path, version):
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", speculative=draft(trtllm_engine_dir))
    options, _ = planned_options(cfg.model_copy(update={"trtllm_version": version}), tmp_path / "m")
    expected = {
        "decoding_type": "DraftTarget" if version in ("1.0", "1.1") else "Draft_Target",  # the YAML readers' names
        "max_draft_len": 2,
        DRAFT_FIELD[version]: str(trtllm_engine_dir.resolve() / "hf"),
    }
    assert options["speculative_config"] == expected | ({} if version == "1.0" else {"max_concurrency": 8})


def test_the_built_options_yaml_carries_it(tiny_llama, tmp_path):
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", speculative=NGRAM, trtllm_version="1.2")
    out = build_engine(cfg, tmp_path / "m", quiet=True).engine_dir
    written = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert written["speculative_config"] == NGRAM_OPTIONS | {"max_concurrency": 8}


def test_what_tensorrt_llm_cannot_run_is_refused_in_one_sentence(tiny_llama, tiny_llama_engine, tmp_path):
    cases = [
        (BuildConfig(model=str(tiny_llama), backend="tensorrt", speculative=NGRAM), "PyTorch backend only"),
        (
            BuildConfig(
                model=str(tiny_llama), backend="trtllm", speculative=NGRAM.model_copy(update={"prompt_lookup_min": 2})
            ),
            "prompt_lookup_min 2 has no TensorRT-LLM counterpart",
        ),
        (
            BuildConfig(model=str(tiny_llama), backend="trtllm", speculative=draft(tiny_llama_engine)),
            "was built for the torch backend; TensorRT-LLM loads its draft from a Hugging Face checkpoint",
        ),
    ]
    for cfg, message in cases:
        with pytest.raises(UserError, match=message) as err:
            dry_run(cfg, tmp_path / "x")
        assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="speculative is a run-time option on the torch backend"):
        build_engine(BuildConfig(model=str(tiny_llama), speculative=NGRAM), tmp_path / "torch", quiet=True)
    assert not (tmp_path / "torch").exists() and not (tmp_path / "x").exists()


# ---- the LLM: each release's decoding config classes --------------------------------------------------
def test_the_llm_gets_the_release_ngram_config(fake_trtllm, release, trtllm_engine_dir):
    e = open_engine(trtllm_engine_dir, speculative=NGRAM)
    try:
        [llm] = fake_trtllm.INSTANCES
        spec = llm.kwargs["speculative_config"]
        assert type(spec) is fake_trtllm.llmapi.NGramDecodingConfig
        assert llm.llm_args.speculative_config is spec  # the release's args model took it (PyTorch backend)
        got = spec.model_dump(include={"max_draft_len", "max_matching_ngram_size", "is_use_oldest", "is_public_pool"})
        assert got == {
            "max_draft_len": 4,
            "max_matching_ngram_size": 3,
            "is_use_oldest": False,
            "is_public_pool": False,
        }
        assert getattr(spec, "max_concurrency", None) == (None if release == "1.0" else 8)
        assert greedy(e) == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB)
    finally:
        e.shutdown()


def test_the_llm_gets_the_release_draft_target_config(fake_trtllm, release, trtllm_engine_dir):
    e = open_engine(trtllm_engine_dir, speculative=draft(trtllm_engine_dir))  # the engine as its own draft
    try:
        [llm] = fake_trtllm.INSTANCES
        spec = llm.kwargs["speculative_config"]
        assert type(spec) is fake_trtllm.llmapi.DraftTargetDecodingConfig
        assert (spec.max_draft_len, str(getattr(spec, DRAFT_FIELD[release]))) == (
            2,
            str(trtllm_engine_dir.resolve() / "hf"),
        )
    finally:
        e.shutdown()


@pytest.mark.parametrize(("planned", "release"), [("1.0", "main"), ("main", "1.0"), ("1.0", "1.2")])
def test_a_yaml_planned_for_one_release_runs_on_another(
    tiny_llama, trtllm_engine_dir, tmp_path, planned, release, fake_trtllm
):
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", speculative=draft(trtllm_engine_dir))
    out = build_engine(cfg.model_copy(update={"trtllm_version": planned}), tmp_path / "m", quiet=True).engine_dir
    e = open_engine(out)  # no run option: the engine dir's speculative_config is used
    try:
        spec = fake_trtllm.INSTANCES[0].kwargs["speculative_config"]
        assert str(getattr(spec, DRAFT_FIELD[release])) == str(trtllm_engine_dir.resolve() / "hf")  # renamed
        concurrency = None if "1.0" in (planned, release) else 8  # planned without it, or dropped for 1.0
        assert getattr(spec, "max_concurrency", None) == concurrency
    finally:
        e.shutdown()


def test_eagle3_and_mtp_from_a_hand_written_yaml(fake_trtllm, release):
    from trtserve.backends.tensorrt_llm.speculative import decoding_config

    mtp = decoding_config(fake_trtllm, {"decoding_type": "MTP", "num_nextn_predict_layers": 2})
    assert type(mtp) is fake_trtllm.llmapi.MTPDecodingConfig and mtp.num_nextn_predict_layers == 2
    eagle3 = {"decoding_type": "Eagle3", "max_draft_len": 3, DRAFT_FIELD[release]: "/models/eagle3"}
    if release == "1.0":  # 1.0 has no Eagle3DecodingConfig: EAGLE-3 is EagleDecodingConfig there
        with pytest.raises(UserError, match="has decoding_type 'Eagle3', which TensorRT-LLM 1.0.0 has no decoding"):
            decoding_config(fake_trtllm, eagle3)
        return
    spec = decoding_config(fake_trtllm, eagle3)
    assert type(spec) is fake_trtllm.llmapi.Eagle3DecodingConfig
    assert getattr(spec, DRAFT_FIELD[release]) == "/models/eagle3"
    with pytest.raises(UserError, match="refused speculative_config") as err:
        decoding_config(fake_trtllm, {"decoding_type": "NGram", "max_draft_len": 0})  # upstream: must be > 0
    assert "\n" not in str(err.value)


def test_the_fakes_decoding_configs_refuse_what_upstream_refuses(fake_trtllm, release):
    llmapi = fake_trtllm.llmapi
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens"):  # the pre-1.0 name
        llmapi.NGramDecodingConfig(max_draft_len=2, prompt_lookup_num_tokens=2)
    new, old = "speculative_model", "speculative_model_dir"
    if release == "1.0":  # decoding_type is a ClassVar, the draft field has its old name only
        with pytest.raises(ValueError, match="decoding_type"):
            llmapi.NGramDecodingConfig(max_draft_len=2, decoding_type="NGram")
        with pytest.raises(ValueError, match=new):
            llmapi.DraftTargetDecodingConfig(max_draft_len=2, **{new: "/d"})
    elif release == "1.2":  # the old name is an alias
        assert llmapi.DraftTargetDecodingConfig(max_draft_len=2, **{old: "/d"}).speculative_model == "/d"
    elif release == "1.1":  # decoding_type a field already, the draft field still the old name only
        assert llmapi.DraftTargetDecodingConfig(max_draft_len=2, decoding_type="Draft_Target", **{old: "/d"})
        with pytest.raises(ValueError, match=new):
            llmapi.DraftTargetDecodingConfig(max_draft_len=2, **{new: "/d"})
    else:
        with pytest.raises(ValueError, match=old):
            llmapi.DraftTargetDecodingConfig(max_draft_len=2, **{old: "/d"})
    if release != "main":  # TrtLlmArgs: NGram runs on PyTorch only (supports_backend)
        from tensorrt_llm.llmapi.llm_args import TrtLlmArgs

        with pytest.raises(ValueError, match="does not support backend tensorrt"):
            TrtLlmArgs(model="m", speculative_config=llmapi.NGramDecodingConfig(max_draft_len=2))


# ---- requests -------------------------------------------------------------------------------------------
def test_a_requests_opt_out_is_refused_while_the_engine_speculates(fake_trtllm, trtllm_engine_dir):
    e = open_engine(trtllm_engine_dir, speculative=NGRAM)
    try:
        with pytest.raises(UserError, match="TensorRT-LLM has no per-request switch") as err:
            greedy(e, speculate=False)
        assert "\n" not in str(err.value)
        assert fake_trtllm.INSTANCES[0].kwargs["speculative_config"] is not None
        assert greedy(e) == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB)
    finally:
        e.shutdown()


def test_without_speculation_an_opt_out_is_honoured_trivially(engine, fake_trtllm):
    assert "speculative_config" not in fake_trtllm.INSTANCES[0].kwargs
    assert greedy(engine, speculate=False) == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB)


@pytest.mark.parametrize("release", ["1.2"])
def test_a_tensorrt_engine_refuses_the_option(fake_gpu, tiny_llama, tmp_path):
    out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True).engine_dir
    with pytest.raises(UserError, match="engine option speculative .* is not available on the tensorrt backend"):
        open_engine(out, speculative=NGRAM)


# ---- acceptance read back: per request (perf metrics) and engine totals (iteration stats) ------------------
def spec_facts(release):
    from trtllm_fake_core.facts import FACTS

    return FACTS[release]


def run_all(engine, prompts: list[list[int]], max_tokens: int = 24) -> list[list]:
    """Each prompt's deltas, the requests run at once."""

    async def one(prompt):
        r = GenerateRequest(list(prompt), SamplingParams(max_tokens=max_tokens, temperature=0.0))
        return [d async for d in engine.generate(r)]

    async def run():
        return await asyncio.gather(*(one(p) for p in prompts))

    return asyncio.run(run())


@pytest.fixture
def fast_stats(monkeypatch):
    """The stats poller waits 0.1 s (not 1 s) between idle rounds."""
    from trtserve.backends.tensorrt_llm import engine as engine_module

    monkeypatch.setattr(engine_module, "STATS_POLL_S", 0.1)


def settled_totals(engine):
    """engine.stats().spec once the stats poller has drained what the finished requests left queued."""
    import time

    deadline = time.monotonic() + 10  # a bound on the wait, not a timing assertion
    while not engine._poller.quiet() and time.monotonic() < deadline:  # the round that takes the last burst
        time.sleep(0.02)
    return engine.stats().spec


def reported(llm) -> SpecCounts:
    """What the fake's iteration stats reported, summed."""
    out = SpecCounts()
    for s in llm.speculation.reported:
        out.drafts += s["numRequestsWithDraftTokens"]
        out.draft_tokens += s["numDraftTokens"]
        out.accepted_tokens += s["numAcceptedTokens"]
    return out


def test_acceptance_is_read_back_as_the_release_reports_it(fake_trtllm, release, trtllm_engine_dir, caplog, fast_stats):
    facts = spec_facts(release)
    with caplog.at_level("INFO", logger="trtserve.backends.tensorrt_llm.spec_counts"):
        e = open_engine(trtllm_engine_dir, speculative=NGRAM)
    try:
        [deltas] = run_all(e, [PROMPT])
        [llm] = fake_trtllm.INSTANCES
        assert [t for d in deltas for t in d.token_ids] == fake_trtllm.reference_greedy(PROMPT, 24, VOCAB)
        [tally] = llm.speculation.tallies.values()  # what the fake's verifier did for the request
        assert tally.drafts > 1 and 0 < tally.accepted < tally.draft_tokens
        assert llm.last_params.return_perf_metrics is facts.spec_request_metrics  # asked only where filled
        counts = [d.spec for d in deltas]
        if facts.spec_request_metrics:  # running totals on each delta; the last is the request's
            assert counts[-1] == SpecCounts(draft_tokens=tally.draft_tokens, accepted_tokens=tally.accepted)
        else:
            assert counts == [None] * len(deltas)
        totals = settled_totals(e)
        if facts.spec_iteration_stats:
            assert totals == reported(llm) == SpecCounts(tally.drafts, tally.draft_tokens, tally.accepted)
        else:
            assert totals == SpecCounts() and llm.speculation.reported == []
        said = [r.getMessage() for r in caplog.records if "speculative-decoding acceptance" in r.getMessage()]
        if facts.spec_request_metrics:
            assert said == []
        else:  # once, at start
            [line] = said
            assert ("per iteration only" if facts.spec_iteration_stats else "reports no speculative") in line
    finally:
        e.shutdown()


@pytest.mark.parametrize("release", ["1.2", "main"])
def test_engine_totals_add_up_over_concurrent_requests(fake_trtllm, release, trtllm_engine_dir, fast_stats):
    from trtserve.serve.speculative import total

    e = open_engine(trtllm_engine_dir, speculative=NGRAM)
    try:
        prompts = [PROMPT, [9, 3, 77, 5], [11, 13, 17, 19, 23, 29]]
        results = run_all(e, prompts, max_tokens=16)
        [llm] = fake_trtllm.INSTANCES
        for prompt, deltas in zip(prompts, results, strict=True):
            assert [t for d in deltas for t in d.token_ids] == fake_trtllm.reference_greedy(prompt, 16, VOCAB)
        tallies = list(llm.speculation.tallies.values())
        want = SpecCounts(
            drafts=sum(t.drafts for t in tallies),
            draft_tokens=sum(t.draft_tokens for t in tallies),
            accepted_tokens=sum(t.accepted for t in tallies),
        )
        assert settled_totals(e) == reported(llm) == want
        per_request = total(d.spec for deltas in results for d in deltas[-1:])
        if release == "main":  # per request: no verification passes, the same tokens
            assert per_request == SpecCounts(draft_tokens=want.draft_tokens, accepted_tokens=want.accepted_tokens)
        else:
            assert per_request == SpecCounts()
    finally:
        e.shutdown()


def test_without_speculation_nothing_is_asked_or_reported(engine, fake_trtllm):
    [deltas] = run_all(engine, [PROMPT], max_tokens=8)
    [llm] = fake_trtllm.INSTANCES
    assert llm.speculation is None and llm.last_params.return_perf_metrics is False
    assert [d.spec for d in deltas] == [None] * len(deltas)
    assert engine.stats().spec == SpecCounts()


def test_the_fakes_report_acceptance_where_their_release_does(fake_trtllm, release, trtllm_engine_dir):
    """The fake on its own: specDecodingStats in iteration stats, and a filled perf-metrics section,
    only on the releases whose source fills them; the perf-metrics section exists (zero) on all."""
    facts = spec_facts(release)
    llm = fake_trtllm.LLM(
        str(trtllm_engine_dir / "hf"), speculative_config=fake_trtllm.llmapi.NGramDecodingConfig(max_draft_len=3)
    )
    try:
        sp = fake_trtllm.SamplingParams(max_tokens=12, top_k=1, return_perf_metrics=True)

        async def run():
            return [o async for o in llm.generate_async(list(PROMPT), sampling_params=sp, streaming=True)]

        last = asyncio.run(run())[-1].outputs[0]
        section = last.request_perf_metrics.speculative_decoding
        [tally] = llm.speculation.tallies.values()
        filled = (section.total_draft_tokens, section.total_accepted_draft_tokens) == (
            tally.draft_tokens,
            tally.accepted,
        )
        assert filled is facts.spec_request_metrics
        assert filled or section.total_draft_tokens == section.total_accepted_draft_tokens == 0
        stats = fake_trtllm_stats(llm)
        assert any("specDecodingStats" in s for s in stats) is facts.spec_iteration_stats
    finally:
        llm.shutdown()


def fake_trtllm_stats(llm) -> list[dict]:
    async def drain():
        return [s async for s in llm.get_stats_async(timeout=0.5)]  # above the 0.2 s between bursts

    return asyncio.run(drain())
