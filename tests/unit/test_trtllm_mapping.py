"""TensorRT-LLM <-> trtserve mappings: sampling fields, streamed outputs, iteration stats, compatibility."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from test_trtllm_plans import check_golden

from trtserve.backends.tensorrt_llm.capabilities import planned, release_line
from trtserve.backends.tensorrt_llm.compat import check_compatible
from trtserve.backends.tensorrt_llm.install import Target
from trtserve.backends.tensorrt_llm.outputs import DeltaTracker, map_finish_reason
from trtserve.backends.tensorrt_llm.sampling import check_supported, to_trtllm_sampling
from trtserve.backends.tensorrt_llm.stats import decode, engine_stats
from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams

SAMPLING_CASES = {
    "default": {},
    "greedy": {"temperature": 0.0, "max_tokens": 8},
    "top_k_1_is_greedy": {"top_k": 1, "temperature": 0.7},
    "full": {
        "n": 2,
        "max_tokens": 64,
        "min_tokens": 4,
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "seed": 1234,
        "stop": ["\n\n"],
        "stop_token_ids": [7, 9],
        "bad_words_ids": [[5], [6]],
        "logprobs": 3,
    },
    "ignore_eos_logprobs_0": {"ignore_eos": True, "logprobs": 0, "temperature": 0.0},
}


@pytest.mark.parametrize("case", SAMPLING_CASES)
def test_sampling_golden(case):
    p = SamplingParams(**SAMPLING_CASES[case])
    check_golden(f"sampling_{case}", to_trtllm_sampling(p, eos_token_ids=[1, 2]))


def test_sampling_sets_only_trtllm_fields():
    """Every key is a field of tensorrt_llm.SamplingParams (1.0.0rc4, fact sheet 3b)."""
    path = Path(__file__).parents[1] / "contract/fake_trtllm/trtllm_fake_core/sampling_fields.py"
    spec = importlib.util.spec_from_file_location("trtllm_sampling_fields", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fields = module.SAMPLING_FIELDS
    for case in SAMPLING_CASES.values():
        assert set(to_trtllm_sampling(SamplingParams(**case), [1])) <= fields


@pytest.mark.parametrize(
    "params, extra, field",
    [
        ({"prompt_logprobs": 1}, {}, "prompt_logprobs"),
        ({"bad_words_ids": [[5, 6]]}, {}, "bad_words_ids"),
        ({}, {"priority": 1.0}, "priority"),
        ({}, {"cache_salt": "x"}, "cache_salt"),
        ({"seed": -1}, {}, "seed"),
    ],
)
def test_unsupported_settings_are_refused(params, extra, field):
    req = GenerateRequest([1, 2], SamplingParams(**params), RequestOptions(**extra))
    with pytest.raises(UserError, match=f"^{field}: .*tensorrt_llm|^{field}: TensorRT-LLM seeds"):
        check_supported(req)


def test_supported_request_passes():
    check_supported(GenerateRequest([1], SamplingParams(**SAMPLING_CASES["full"])))


@pytest.mark.parametrize("params", [{"temperature": 0.0}, {"top_k": 1, "temperature": 0.8}])
def test_greedy_with_n_above_1_is_refused_unless_the_server_allows_it(params):
    """TensorRT-LLM's SamplingParams raises for it (unless TLLM_ALLOW_N_GREEDY_DECODING is set)."""
    req = GenerateRequest([1], SamplingParams(n=3, **params))
    with pytest.raises(UserError, match="^n=3 with greedy decoding .* TLLM_ALLOW_N_GREEDY_DECODING=1$"):
        check_supported(req)
    check_supported(req, allow_n_greedy=True)
    check_supported(GenerateRequest([1], SamplingParams(n=3, temperature=0.5)))


# ---- finish reasons and deltas ---------------------------------------------------------------
@pytest.mark.parametrize(
    "value, ours",
    [
        (0, None),
        (1, "stop"),  # END_ID
        (2, "stop"),  # STOP_WORDS
        (3, "length"),  # LENGTH
        (4, "abort"),  # TIMED_OUT
        (5, "abort"),  # CANCELLED
        (NS(name="STOP_WORDS"), "stop"),  # a pybind enum member
        ("stop", "stop"),
        ("length", "length"),
        ("timeout", "abort"),
        ("cancelled", "abort"),
        (None, None),
    ],
)
def test_finish_reasons(value, ours):
    assert map_finish_reason(value) == ours


@pytest.mark.parametrize("value", [6, "eos", NS(name="WHATEVER")])
def test_unknown_finish_reason_is_a_bug_not_silence(value):
    with pytest.raises(ValueError, match="unknown TensorRT-LLM finish reason"):
        map_finish_reason(value)


def _out(index, ids, finish=None, stop=None, logprobs=None):
    return NS(index=index, token_ids=ids, finish_reason=finish, stop_reason=stop, logprobs=logprobs or [])


def test_deltas_from_cumulative_snapshots():
    t = DeltaTracker("r1", num_prompt_tokens=5, stop_token_ids=frozenset({9}))
    snaps = [
        [_out(0, [4]), _out(1, [])],
        [_out(0, [4, 8]), _out(1, [3])],
        [_out(0, [4, 8]), _out(1, [3, 9], "stop", 9)],  # seq 1 stops on a user stop id
        [_out(0, [4, 8, 1], "stop", None), _out(1, [3, 9], "stop", 9)],  # seq 0 on EOS; seq 1 not repeated
    ]
    got = [[(d.index, d.token_ids, d.finish_reason, d.stop_reason) for d in t.deltas(NS(outputs=s))] for s in snaps]
    assert got == [
        [(0, [4], None, None)],
        [(0, [8], None, None), (1, [3], None, None)],
        [(1, [9], "stop", 9)],
        [(0, [1], "stop", None)],
    ]
    assert t.finished == {0, 1}


def test_eos_from_generation_config_is_not_a_user_stop_reason():
    t = DeltaTracker("r", 1, stop_token_ids=frozenset({9}))
    [d] = t.deltas(NS(outputs=[_out(0, [2], "stop", 2)]))  # 2: an extra EOS passed as a stop id
    assert (d.finish_reason, d.stop_reason) == ("stop", None)


def test_cancel_and_length():
    t = DeltaTracker("r", 1)
    assert [(d.token_ids, d.finish_reason) for d in t.deltas(NS(outputs=[_out(0, [5, 6], "cancelled")]))] == [
        ([5, 6], "abort")
    ]
    t = DeltaTracker("r", 1)
    assert t.deltas(NS(outputs=[_out(0, [5], "length")]))[0].finish_reason == "length"


def test_logprobs_dicts_and_floats():
    Lp = lambda lp, rank: NS(logprob=lp, rank=rank)  # noqa: E731
    t = DeltaTracker("r", 1, top_logprobs=2)
    entries = [{7: Lp(-0.1, 1), 8: Lp(-2.5, 2), 9: Lp(-3.0, 3)}, {8: Lp(-0.7, 2), 3: Lp(-0.2, 1)}]
    [d] = t.deltas(NS(outputs=[_out(0, [7, 8], logprobs=entries)]))
    assert [(x.token_id, x.logprob, x.rank, x.top) for x in d.logprobs] == [
        (7, -0.1, 1, [(7, -0.1), (8, -2.5)]),
        (8, -0.7, 2, [(3, -0.2), (8, -0.7)]),
    ]
    t = DeltaTracker("r", 1, top_logprobs=0)
    [d] = t.deltas(NS(outputs=[_out(0, [7], logprobs=[-0.25])]))
    assert [(x.token_id, x.logprob, x.top) for x in d.logprobs] == [(7, -0.25, [])]


def test_abort_all_finishes_only_running_sequences():
    t = DeltaTracker("r", 1)
    t.deltas(NS(outputs=[_out(0, [1], "stop"), _out(1, [2])]))
    assert [(d.index, d.finish_reason, d.error) for d in t.abort_all(2, "boom")] == [(1, "error", "boom")]


# ---- iteration stats ---------------------------------------------------------------------------
ITER_STATS = {  # IterationStats.to_json_str() keys (fact sheet 3a)
    "timestamp": "12-02-2026 15:00:00",
    "iter": 41,
    "iterLatencyMS": 12.5,
    "numActiveRequests": 3,
    "numQueuedRequests": 2,
    "numCompletedRequests": 1,
    "maxNumActiveRequests": 64,
    "gpuMemUsage": 1,
    "cpuMemUsage": 0,
    "pinnedMemUsage": 0,
    "kvCacheStats": {
        "maxNumBlocks": 1000,
        "freeNumBlocks": 750,
        "usedNumBlocks": 250,
        "tokensPerBlock": 32,
        "allocTotalBlocks": 400,
        "allocNewBlocks": 300,
        "reusedBlocks": 100,
        "cacheHitRate": 0.25,
    },
    "inflightBatchingStats": {"numScheduledRequests": 3, "numContextRequests": 1, "numGenRequests": 2},
}


def test_iteration_stats_to_engine_stats():
    s = engine_stats(ITER_STATS, prompt_tokens=120, generated_tokens=40)
    assert (s.scheduler.running, s.scheduler.waiting, s.scheduler.steps) == (3, 2, 42)
    assert (s.kv_cache.blocks_total, s.kv_cache.blocks_used, s.kv_cache.blocks_free, s.kv_cache.utilization) == (
        1000,
        250,
        750,
        0.25,
    )
    assert (s.prefix_cache.queries, s.prefix_cache.hits) == (400 * 32, 100 * 32)
    assert (
        s.scheduler.prompt_tokens,
        s.scheduler.generated_tokens,
        s.scheduler.preemptions,
        s.kv_cache.blocks_cached,
    ) == (120, 40, 0, 0)


def test_no_stats_yet_is_an_idle_engine():
    s = engine_stats(None, prompt_tokens=0, generated_tokens=0)
    assert (
        s.scheduler.running,
        s.scheduler.waiting,
        s.kv_cache.blocks_total,
        s.kv_cache.utilization,
        s.scheduler.steps,
    ) == (0, 0, 0, 0.0, 0)


def test_decode_reads_dicts_and_json():
    import json

    assert decode([{"iter": 1}, json.dumps({"iter": 2})])[-1] == {"iter": 2}
    assert decode([]) == []


# ---- compatibility -------------------------------------------------------------------------------
BUILT = Target(tensorrt_llm="1.2.1", tensorrt="10.9.0.34", cuda="12.8", gpu_name="NVIDIA H100", sm="9.0")


def _manifest(backend):
    return NS(backend=backend, source={"path": "/models/llama"})


def _caps(installed: Target):
    """The installed release's capabilities as the release table has them (None: not installed)."""
    return planned(installed.tensorrt_llm) if installed.tensorrt_llm else None


@pytest.mark.parametrize(
    "backend, installed, message",
    [
        (
            "tensorrt",
            Target(tensorrt_llm="1.2.0", tensorrt="10.9.0.34", sm="9.0"),
            "E was built for TensorRT-LLM 1.2.1 but this host has 1.2.0; rebuild it on this host with "
            "`trtserve build /models/llama -o E --backend tensorrt --force`",
        ),
        (
            "tensorrt",
            Target(tensorrt_llm="1.2.1", tensorrt="10.10.0", sm="9.0"),
            "E was built for TensorRT 10.9.0.34 but this host has 10.10.0; rebuild it on this host with "
            "`trtserve build /models/llama -o E --backend tensorrt --force`",
        ),
        (
            "tensorrt",
            Target(tensorrt_llm="1.2.1", tensorrt="10.9.0.34", sm="8.0"),
            "E was built for GPU compute capability (SM) 9.0 but this host has 8.0; rebuild it on this host with "
            "`trtserve build /models/llama -o E --backend tensorrt --force`",
        ),
        (
            "tensorrt",
            Target(tensorrt_llm="1.2.1", tensorrt="10.9.0.34", sm=None),
            "E was built for GPU compute capability (SM) 9.0 but this host has none (no CUDA GPU visible)",
        ),
        (
            "tensorrt",
            Target(tensorrt_llm="1.2.1", tensorrt=None, sm="9.0"),
            "E was built for TensorRT 10.9.0.34 but this host has not installed",
        ),
        ("tensorrt", Target(tensorrt_llm="1.4.0", tensorrt="10.9.0.34", sm="9.0"), "has no TensorRT backend"),
        ("tensorrt", Target(), "E needs TensorRT-LLM, which is not installed; install it with `pip install"),
    ],
)
def test_compat_mismatches(backend, installed, message):
    with pytest.raises(UserError) as err:
        check_compatible(_manifest(backend), BUILT, installed, _caps(installed), "E")
    assert message in str(err.value)


def test_tensorrt_llm_before_1_0_is_refused():
    with pytest.raises(UserError, match="TensorRT-LLM 0.19.0 is older than 1.0, the first release trtserve supports"):
        release_line("0.19.0")


@pytest.mark.parametrize(
    "backend, installed",
    [
        ("tensorrt", Target(tensorrt_llm="1.2.1", tensorrt="10.9.0.34", cuda="12.9", sm="9.0")),  # CUDA may differ
        ("trtllm", Target(tensorrt_llm="1.0.0")),
        ("trtllm", Target(tensorrt_llm="1.3.0rc29")),
    ],
)
def test_compat_matches(backend, installed):
    check_compatible(_manifest(backend), BUILT, installed, _caps(installed), "E")
