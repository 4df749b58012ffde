"""The prefill -> decode hand-off without Dynamo (trtserve/dynamo/handoff.py): a pulled payload imports
into a second engine; an offer nobody pulls is released after its hold time; a dead address is a
TransferError within the timeout."""

import asyncio

import pytest
from helpers import random_prompts

from trtserve.backends.torch_engine import TorchEngine
from trtserve.dynamo.handoff import HandoffClient, HandoffServer
from trtserve.dynamo.transport import ShmTransport, TransferError
from trtserve.engine.kv_transfer import KVHold, KVImport
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams


@pytest.fixture(scope="module")
def engine(tiny_llama_engine):
    e = TorchEngine(tiny_llama_engine)
    yield e
    e.shutdown()


async def _tokens(engine, request):
    return [d async for d in engine.generate(request)]


def test_pull_release_and_expiry(engine):
    prompt = random_prompts(1, seed=23, lo=50, hi=51)[0]
    greedy = SamplingParams(max_tokens=6, temperature=0)

    async def main():
        server, client = HandoffServer(engine, ShmTransport()), HandoffClient(ShmTransport())
        server.start()
        try:
            whole = [t for d in await _tokens(engine, GenerateRequest(prompt, greedy)) for t in d.token_ids]
            one = SamplingParams(max_tokens=1, temperature=0)
            done = (await _tokens(engine, GenerateRequest(prompt, one, RequestOptions(kv_transfer=KVHold()))))[-1]
            offer = server.offer(done.kv_handle, hold_s=30)
            payload = await client.pull(offer)
            await client.release(offer)
            assert server.outstanding == 0
            rest = await _tokens(
                engine,
                GenerateRequest(prompt, greedy, RequestOptions(kv_transfer=KVImport(payload, offer["first_token"]))),
            )
            assert [offer["first_token"]] + [t for d in rest for t in d.token_ids][:5] == whole
            # nobody pulls this one: released by its timer
            done = (await _tokens(engine, GenerateRequest(prompt, one, RequestOptions(kv_transfer=KVHold()))))[-1]
            offer = server.offer(done.kv_handle, hold_s=0.2)
            await asyncio.sleep(0.5)
            assert server.outstanding == 0
            with pytest.raises(TransferError, match="no longer offered"):
                await client.pull(offer)
            with pytest.raises(TransferError, match="did not answer"):
                await client.pull({**offer, "address": "tcp://127.0.0.1:1"}, timeout=0.5)
        finally:
            await server.close()
            client.close()

    asyncio.run(main())
    deadline = 50
    while engine.stats().kv_cache.blocks_used and deadline:
        asyncio.run(asyncio.sleep(0.05))
        deadline -= 1
    assert engine.stats().kv_cache.blocks_used == 0
