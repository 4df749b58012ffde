"""Disaggregated prefill/decode inside the torch engine (engine/kv_transfer.py): a prefill engine holds a
prompt's KV, a second engine imports it and decodes, and the tokens equal one engine doing both."""

import asyncio
import time

import pytest
from helpers import random_prompts

from trtserve.backends.torch_engine import TorchEngine
from trtserve.engine.errors import UserError
from trtserve.engine.kv_cache_events import PrefixRemoved, PrefixStored
from trtserve.engine.kv_transfer import KVHold, KVImport
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams


@pytest.fixture(scope="module")
def engines(tiny_llama_engine):
    prefill, decode = TorchEngine(tiny_llama_engine), TorchEngine(tiny_llama_engine)
    yield prefill, decode
    prefill.shutdown()
    decode.shutdown()


async def _run(engine, request):
    tokens, last = [], None
    async for d in engine.generate(request):
        tokens += d.token_ids
        last = d
    return tokens, last


async def _disaggregated(prefill, decode, prompt, max_tokens):
    first, done = await _run(
        prefill,
        GenerateRequest(prompt, SamplingParams(max_tokens=1, temperature=0), RequestOptions(kv_transfer=KVHold())),
    )
    handle = done.kv_handle
    assert handle is not None and first == [handle.first_token] and handle.num_tokens == len(prompt)
    payload = await prefill.export_kv(handle)
    prefill.release_kv(handle)
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    rest, _ = await _run(
        decode, GenerateRequest(prompt, params, RequestOptions(kv_transfer=KVImport(payload, handle.first_token)))
    )
    return first + rest


def test_decode_from_imported_kv_equals_one_engine(engines):
    prefill, decode = engines
    prompts = random_prompts(4, seed=3, lo=5, hi=60)

    async def main():
        params = SamplingParams(max_tokens=10, temperature=0)
        for prompt in prompts:
            whole, _ = await _run(prefill, GenerateRequest(prompt, params))
            assert await _disaggregated(prefill, decode, prompt, 10) == whole

    asyncio.run(main())
    for engine in engines:  # nothing held, nothing leaked
        assert engine.stats().kv_cache.blocks_used == 0


def test_unpulled_hold_expires_and_bad_imports_are_refused(engines):
    prefill, decode = engines
    prompt = random_prompts(1, seed=5, lo=40, hi=41)[0]

    async def main():
        params = SamplingParams(max_tokens=1, temperature=0)
        _, done = await _run(prefill, GenerateRequest(prompt, params, RequestOptions(kv_transfer=KVHold(hold_s=0.2))))
        assert prefill.stats().kv_cache.blocks_used == 3  # 40 tokens in blocks of 16
        payload = await prefill.export_kv(done.kv_handle)
        deadline = time.monotonic() + 10
        while prefill.stats().kv_cache.blocks_used and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert prefill.stats().kv_cache.blocks_used == 0
        with pytest.raises(UserError, match="no longer held"):
            await prefill.export_kv(done.kv_handle)
        with pytest.raises(UserError, match="holds 40 tokens but the prompt has 39"):
            decode.check(GenerateRequest(prompt[:-1], params, RequestOptions(kv_transfer=KVImport(payload, 1))))

    asyncio.run(main())


def test_kv_events_reach_a_subscriber(engines):
    prefill, _ = engines
    events = []
    unsubscribe = prefill.subscribe_kv_events(events.append)
    prompt = random_prompts(1, seed=9, lo=33, hi=34)[0]

    async def main():
        await _run(
            prefill,
            GenerateRequest(prompt, SamplingParams(max_tokens=1, temperature=0), RequestOptions(cache_namespace="ns")),
        )
        await prefill.invalidate_cache("ns")

    asyncio.run(main())
    unsubscribe()
    stored = [e for e in events if isinstance(e, PrefixStored)]
    assert [e.token_ids for e in stored] == [tuple(prompt[:16]), tuple(prompt[16:32])]
    assert stored[0].namespace == "ns" and stored[1].parent == stored[0].key
    removed = [e for e in events if isinstance(e, PrefixRemoved)]
    assert sorted(e.key for e in removed) == sorted(e.key for e in stored) and not any(e.evicted for e in removed)
