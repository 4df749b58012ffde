"""The tensorrt_llm adapter end to end over the contract fakes: request in, streamed deltas out,
cancel, errors, stats, compatibility. Every test runs against the fakes of TensorRT-LLM 1.0, 1.2 and
main (conftest.py), each behaving as that release's source does."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams

VOCAB = 320
PROMPT = [5, 17, 42, 99, 7]


def collect(engine, request, stop_after=None):
    async def run():
        out = []
        gen = engine.generate(request)
        async for d in gen:
            out.append(d)
            if stop_after is not None and len(out) == stop_after:
                await gen.aclose()
                break
        return out

    return asyncio.run(run())


def req(rid="r", prompt=PROMPT, **params):
    return GenerateRequest(list(prompt), SamplingParams(**params), RequestOptions(client_id=rid))


def test_llm_gets_the_options_yaml_with_runtime_overrides(engine, fake_trtllm, trtllm_engine_dir):
    [llm] = fake_trtllm.INSTANCES
    assert llm.model == str(trtllm_engine_dir / "hf") and llm.tokenizer == str(trtllm_engine_dir / "tokenizer")
    kv = llm.kwargs["kv_cache_config"]
    bytes_per_token = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads x head 16, float32
    assert (kv.max_tokens, kv.enable_block_reuse, kv.free_gpu_memory_fraction) == (
        (1 << 20) // bytes_per_token,
        True,
        0.9,
    )
    assert llm.kwargs["cuda_graph_config"].enable_padding is True
    assert llm.tensor_parallel_size == 1
    assert (llm.kwargs["max_batch_size"], llm.kwargs["max_seq_len"], llm.kwargs["enable_chunked_prefill"]) == (
        8,
        256,
        True,
    )


def test_greedy_stream_is_one_delta_per_step_and_ends_on_length(engine, fake_trtllm):
    deltas = collect(engine, req(max_tokens=6, temperature=0.0))
    assert [d.token_ids for d in deltas] == [[t] for t in fake_trtllm.reference_greedy(PROMPT, 6, VOCAB)]
    assert [d.finish_reason for d in deltas] == [None] * 5 + ["length"]
    assert len({d.request_id for d in deltas}) == 1 and all(d.num_prompt_tokens == len(PROMPT) for d in deltas)


def test_stop_token_ends_with_its_id(engine, fake_trtllm):
    ref = fake_trtllm.reference_greedy(PROMPT, 10, VOCAB)
    deltas = collect(engine, req(max_tokens=10, temperature=0.0, stop_token_ids=[ref[3]]))
    tokens = [t for d in deltas for t in d.token_ids]
    assert tokens == ref[: ref.index(ref[3]) + 1]
    assert (deltas[-1].finish_reason, deltas[-1].stop_reason) == ("stop", ref[3])


def test_eos_ends_with_stop_and_no_stop_reason(engine, fake_trtllm):
    prompt, eos = [6, 4], 1
    ref = fake_trtllm.reference_greedy(prompt, 20, VOCAB)
    assert ref.index(eos) == 6  # the toy model emits EOS as its 7th token for this prompt
    deltas = collect(engine, req(prompt=prompt, max_tokens=20, temperature=0.0))
    assert [t for d in deltas for t in d.token_ids] == ref[: ref.index(eos) + 1]
    assert (deltas[-1].finish_reason, deltas[-1].stop_reason) == ("stop", None)
    ignored = collect(engine, req("r2", prompt=prompt, max_tokens=20, temperature=0.0, ignore_eos=True))
    assert [t for d in ignored for t in d.token_ids] == ref and ignored[-1].finish_reason == "length"


def test_abort_cancels_in_trtllm_and_finishes_with_abort(engine, fake_trtllm):
    async def run():
        out = []
        r = req(max_tokens=200, temperature=0.0)
        async for d in engine.generate(r):
            out.append(d)
            if len(out) == 2:
                engine.abort(r.request_id)
        return out

    deltas = asyncio.run(run())
    assert deltas[-1].finish_reason == "abort" and all(d.finish_reason is None for d in deltas[:-1])
    assert len([t for d in deltas for t in d.token_ids]) < 200
    [llm] = fake_trtllm.INSTANCES
    assert len(llm.aborted_ids) == 1


def test_leaving_the_stream_early_aborts_the_request(engine, fake_trtllm):
    deltas = collect(engine, req(max_tokens=200, temperature=0.0), stop_after=3)
    assert len(deltas) == 3
    [llm] = fake_trtllm.INSTANCES
    deadline = time.time() + 5
    while not llm.aborted_ids and time.time() < deadline:
        time.sleep(0.01)
    assert len(llm.aborted_ids) == 1 and not llm._active


def test_engine_error_finishes_the_request_with_error(engine, fake_trtllm):
    deltas = collect(engine, req(prompt=[fake_trtllm.FAIL_TOKEN, 9, 9], max_tokens=50, temperature=0.0))
    assert deltas[-1].finish_reason == "error"
    assert "RequestError: fake executor error" in deltas[-1].error


def test_n_sequences_and_logprobs(engine, release):
    """Sampled tokens' logprobs where the release returns them with the sampled token (test_trtllm_logprobs.py
    has the refusals), equal to the fake's toy distribution: rank (t - greedy) mod vocab + 1, logprob -rank/2."""
    from trtllm_fake import load_toy_model

    if release == "1.1":  # its top-k may leave the sampled token out: refused
        with pytest.raises(UserError, match="may leave the sampled token out"):
            collect(engine, req(max_tokens=4, n=2, temperature=0.8, seed=7, logprobs=2))
        return
    k = 0 if release == "1.0" else 2  # 1.0: the sampled token's logprob only
    deltas = collect(engine, req(max_tokens=4, n=2, temperature=0.8, seed=7, logprobs=k))
    toy = load_toy_model()
    for i in (0, 1):
        mine = [d for d in deltas if d.index == i]
        assert sum(len(d.token_ids) for d in mine) == 4 and mine[-1].finish_reason == "length"
        seq = list(PROMPT)
        for lp in [lp for d in mine for lp in d.logprobs]:
            greedy = toy.next_greedy(seq, VOCAB)
            rank = (lp.token_id - greedy) % VOCAB + 1
            assert (lp.logprob, lp.rank) == (-0.5 * rank, rank)
            assert lp.top == [((greedy + j) % VOCAB, -0.5 * (j + 1)) for j in range(k)]
            seq.append(lp.token_id)
        assert seq[len(PROMPT) :] == [t for d in mine for t in d.token_ids]


def test_seed_reproduces(engine):
    a = collect(engine, req("a", max_tokens=8, temperature=1.0, seed=3))
    b = collect(engine, req("b", max_tokens=8, temperature=1.0, seed=3))
    assert [d.token_ids for d in a] == [d.token_ids for d in b]


def test_every_sampling_mapping_is_accepted_by_trtllm(engine, fake_trtllm, release):
    params = dict(
        n=2, max_tokens=5, min_tokens=2, temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1,
        presence_penalty=0.5, frequency_penalty=-0.5, seed=1, stop_token_ids=[7], bad_words_ids=[[5]],
        logprobs={"1.0": 0, "1.1": None}.get(release, 3),  # what each release returns (logprobs.py)
    )  # fmt: skip
    deltas = collect(engine, req(**params))
    assert {d.index for d in deltas if d.finish_reason} == {0, 1}


@pytest.mark.parametrize(
    "request_, fragment",
    [
        (req(prompt_logprobs=1), "prompt_logprobs: prompt logprobs are not mapped"),
        (GenerateRequest(PROMPT, SamplingParams(), RequestOptions(priority=2.0)), "priority: request priority"),
        (req(prompt=[], max_tokens=1), "the prompt is empty"),
        (req(prompt=[1] * 250, max_tokens=10), "exceeds the engine's max_seq_len (256)"),
        (req(prompt=[VOCAB], max_tokens=1), "prompt token ids must lie in [0, 320)"),
        (req(n=9), "n (9) exceeds the engine's max_batch_size (8)"),
    ],
)
def test_bad_requests_are_refused_before_submission(engine, fake_trtllm, request_, fragment):
    with pytest.raises(UserError) as err:
        engine.check(request_)
    assert fragment in str(err.value)
    with pytest.raises(UserError):
        collect(engine, request_)
    [llm] = fake_trtllm.INSTANCES
    assert llm._next_id == 0  # nothing reached TensorRT-LLM


def test_stats_from_iteration_stats_and_exact_token_counts(engine):
    collect(engine, req("a", prompt=list(range(3, 70)), max_tokens=5, temperature=0.0))
    collect(engine, req("b", prompt=list(range(3, 70)), max_tokens=5, temperature=0.0))
    deadline = time.time() + 10
    while engine.stats().prefix_cache.queries < 4 * 32 and time.time() < deadline:  # stats are polled: wait for b's
        time.sleep(0.05)
    s = engine.stats()
    assert (s.scheduler.prompt_tokens, s.scheduler.generated_tokens) == (2 * 67, 10)
    assert s.kv_cache.blocks_total == ((1 << 20) // 512) // 32 and s.scheduler.steps > 0
    assert (s.prefix_cache.queries, s.prefix_cache.hits) == (4 * 32, 2 * 32)  # 2 full blocks per prompt, the 2nd reused


def test_health_and_shutdown(engine):
    assert engine.health()
    engine.shutdown()
    assert not engine.health()
    with pytest.raises(RuntimeError, match="shut down"):
        collect(engine, req())


def test_tensorrt_llm_older_than_1_0_is_refused_for_trtllm_dirs(fake_trtllm, trtllm_engine_dir, monkeypatch):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    monkeypatch.setattr(fake_trtllm, "__version__", "0.19.0")
    with pytest.raises(UserError, match="TensorRT-LLM 0.19.0 is older than 1.0, the first release trtserve supports"):
        TrtllmEngine(trtllm_engine_dir)
    assert not fake_trtllm.INSTANCES


def test_trtllm_argument_errors_become_user_errors(engine, monkeypatch):
    # let n=9 past our check to TensorRT-LLM's own
    monkeypatch.setattr(engine, "info", dataclasses.replace(engine.info, max_batch_size=100))
    with pytest.raises(UserError, match=r"TensorRT-LLM refused the request: SamplingParams.n \(9\)"):
        collect(engine, req(n=9, temperature=0.5))


@pytest.mark.parametrize("option", ["int8_activations", "deterministic"])
def test_the_torch_backends_options_are_refused(fake_trtllm, trtllm_engine_dir, option):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine
    from trtserve.engine.run_config import RuntimeConfig

    with pytest.raises(UserError, match=f"engine option {option} .* is not available on the trtllm backend") as err:
        TrtllmEngine(trtllm_engine_dir, RuntimeConfig(**{option: True}))
    assert f"remove `{option}` from the run config's engine section" in str(err.value)
    assert not fake_trtllm.INSTANCES  # refused before TensorRT-LLM was started


def test_info_declares_identity_limits_and_what_the_backend_cannot_do(engine, fake_trtllm, trtllm_engine_dir, release):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine
    from trtserve.engine.manifest import engine_fingerprint, read_manifest
    from trtserve.engine.run_config import RuntimeConfig

    manifest, info = read_manifest(trtllm_engine_dir), engine.info
    assert (info.backend, info.platform, info.fingerprint) == ("trtllm", "tensorrt_llm", engine_fingerprint(manifest))
    assert info.backend_version == manifest.toolchain.get("tensorrt_llm", "unknown")
    assert (info.max_seq_len, info.max_batch_size, info.max_num_tokens) == (
        256,
        8,
        fake_trtllm.INSTANCES[0].kwargs["max_num_tokens"],
    )
    caps = info.capabilities
    assert (caps.priorities, caps.prompt_logprobs, caps.cache_invalidation) == (False, False, False)
    assert caps.logprobs and (caps.max_top_logprobs > 0) is (release != "1.0")  # 1.0: the sampled token's only
    assert not caps.guided_decoding  # the built options name no guided_decoding_backend
    with pytest.raises(UserError, match="priority"):
        engine.check(GenerateRequest(list(PROMPT), SamplingParams(), RequestOptions(priority=1.0)))
    smaller = TrtllmEngine(trtllm_engine_dir, RuntimeConfig(kv_cache_memory=1 << 20, max_batch_size=3))
    try:
        assert smaller.info.max_batch_size == 3  # the run config's limit under the build's
    finally:
        smaller.shutdown()


def test_heartbeat_stops_while_tensorrt_llm_does_not_move(engine, fake_trtllm):
    """A hung executor with a request in flight leaves the heartbeat where it was; it moves idle and streaming."""
    [llm] = fake_trtllm.INSTANCES
    idle = engine.heartbeat()
    time.sleep(0.3)
    assert engine.heartbeat() > idle  # idle polls beat

    async def run():
        gen = engine.generate(req(max_tokens=200, temperature=0.0, ignore_eos=True))
        await gen.__anext__()
        with llm._lock:  # the fake executor cannot step
            await asyncio.sleep(0.4)  # stats already queued drain by now
            stalled = engine.heartbeat()
            await asyncio.sleep(0.5)
            assert engine.heartbeat() == stalled
        await gen.__anext__()
        assert engine.heartbeat() > stalled
        await gen.aclose()

    asyncio.run(run())
