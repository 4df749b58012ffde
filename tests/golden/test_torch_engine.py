"""The async torch backend: streaming, concurrency, aborts, failed steps, health."""

from __future__ import annotations

import asyncio

import pytest
from helpers import random_prompts

from trtserve import LLM, SamplingParams
from trtserve.backends.torch_engine import TorchEngine
from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig

P = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_llama_engine):
    e = TorchEngine(tiny_llama_engine, RuntimeConfig(kv_cache_memory=16 << 20))
    yield e
    e.shutdown()


async def _collect(engine, rid, prompt, params=P):
    tokens = []
    async for d in engine.generate(GenerateRequest(prompt, params, RequestOptions(client_id=rid))):
        tokens += d.token_ids
        last = d
    return tokens, last


def test_concurrent_streams_equal_offline(engine, tiny_llama_engine):
    prompts = random_prompts(6, seed=30)
    expected = [o.token_ids for o in LLM(tiny_llama_engine, kv_cache_memory=16 << 20).generate(prompts, P)]

    async def main():
        return await asyncio.gather(*(_collect(engine, f"c{i}", p) for i, p in enumerate(prompts)))

    results = asyncio.run(main())
    assert [t for t, _ in results] == expected
    assert all(last.finish_reason == "length" for _, last in results)
    assert engine.health()


def test_leaving_a_stream_aborts_and_frees_blocks(engine):
    async def main():
        gen = engine.generate(
            GenerateRequest(list(range(5, 60)), SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True))
        )
        async for d in gen:
            if d.token_ids:
                break
        await gen.aclose()
        for _ in range(100):
            await asyncio.sleep(0.02)
            s = engine.stats()
            if s.kv_cache.blocks_used == 0 and s.scheduler.running == 0:
                return s
        return engine.stats()

    s = asyncio.run(main())
    assert s.kv_cache.blocks_used == 0 and s.scheduler.running == 0 and s.scheduler.waiting == 0


def test_bad_request_raises_before_queueing(engine):
    async def main():
        return await _collect(engine, "big", [3] * 250, SamplingParams(max_tokens=20))

    with pytest.raises(UserError, match="exceeds the engine's max_seq_len"):
        asyncio.run(main())


def test_a_failing_step_fails_its_requests_and_the_loop_goes_on(engine, monkeypatch):
    real = engine.core.runner.execute
    calls = {"n": 0}

    def flaky(step):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected")
        return real(step)

    monkeypatch.setattr(engine.core.runner, "execute", flaky)

    async def main():
        first = await _collect(engine, "victim", [5, 6, 7])
        second = await _collect(engine, "survivor", [5, 6, 7])
        return first, second

    (t1, d1), (t2, d2) = asyncio.run(main())
    assert d1.finish_reason == "error" and "injected" in d1.error and t1 == []
    assert d2.finish_reason == "length" and len(t2) == 12
    assert engine.health() and engine.stats().kv_cache.blocks_used == 0


def test_the_model_loads_and_steps_on_the_engine_thread_only(tiny_llama_engine, monkeypatch):
    """One thread runs every OpenMP region: a second thread's team made each region wait on a futex."""
    import threading

    from trtserve.backends import torch_engine

    threads = []
    real = torch_engine.load_engine
    monkeypatch.setattr(torch_engine, "load_engine", lambda *a: threads.append(threading.current_thread()) or real(*a))
    e = TorchEngine(tiny_llama_engine, RuntimeConfig(kv_cache_memory=16 << 20))
    try:
        assert threads == [e._thread] and threading.current_thread() is not e._thread
        tokens, last = asyncio.run(_collect(e, "t0", [5, 6, 7]))
        assert len(tokens) == P.max_tokens and last.finish_reason == "length"
    finally:
        e.shutdown()


def test_info_declares_identity_limits_and_capabilities_and_the_loop_beats(engine, tiny_llama_engine):
    import time

    import trtserve
    from trtserve.engine.layout import read_engine_config
    from trtserve.engine.manifest import engine_fingerprint, read_manifest
    from trtserve.engine.options import EngineOptions

    info, built = engine.info, read_engine_config(tiny_llama_engine).build_config
    assert (info.backend, info.platform, info.backend_version) == ("torch", "trtserve_torch", trtserve.__version__)
    assert info.fingerprint == engine_fingerprint(read_manifest(tiny_llama_engine))
    assert (info.max_seq_len, info.max_batch_size, info.options) == (
        built.max_seq_len,
        built.max_batch_size,
        EngineOptions(),
    )
    caps = info.capabilities
    assert caps.priorities and caps.prompt_logprobs and caps.guided_decoding and caps.cache_invalidation
    beat = engine.heartbeat()
    time.sleep(0.2)
    assert engine.heartbeat() > beat  # idle ticks beat too
    e = TorchEngine(tiny_llama_engine, RuntimeConfig(kv_cache_memory=16 << 20, max_batch_size=2, deterministic=True))
    try:
        assert e.info.max_batch_size == 2 and e.info.options.identity() == {"deterministic": True}
        assert e.loaded.model.deterministic  # the one options value reached the model
    finally:
        e.shutdown()


def test_a_bad_engine_dir_raises_from_the_constructor(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        TorchEngine(tmp_path / "missing")
