"""Disaggregated prefill/decode through Dynamo: a frontend, a prefill worker and a decode worker. The
decode worker pulls the prefill worker's KV (handoff.py) and its tokens equal one engine's; cancelled
requests leave no block held on either side; a dead prefill worker gives errors, never a hang."""

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest
from dynamo_cluster import MODEL, Cluster, post, reference_greedy
from helpers import random_prompts

HOLD_S = 30  # longer than every wait below: blocks freed in time were released, not expired


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_llama_engine):
    c = Cluster(tmp_path_factory.mktemp("dynamo-pd"), tiny_llama_engine)
    try:
        c.add_worker("prefill", "prefill", "--hold-s", str(HOLD_S))
        c.add_worker("decode", "decode")
        c.ready()
        yield c
    finally:
        c.stop()


def _idle(cluster, timeout=15):
    """Until neither worker holds a KV block nor an offer."""
    deadline = time.monotonic() + timeout
    names = ("trtserve_dynamo_kv_blocks_used", "trtserve_dynamo_kv_offers")
    while time.monotonic() < deadline:
        if all(w.metric(n) == 0 for w in cluster.workers.values() for n in names):
            return
        time.sleep(0.1)
    raise AssertionError({label: [w.metric(n) for n in names] for label, w in cluster.workers.items()})


def test_decode_equals_one_engine(cluster, tiny_llama_engine):
    prompts = random_prompts(3, seed=11, lo=5, hi=90)
    expected = reference_greedy(tiny_llama_engine, prompts, 12)
    for prompt, want in zip(prompts, expected, strict=True):
        tokens, where = cluster.complete(prompt, 12)
        assert tokens == want
        assert where["prefill_worker_id"] != where["decode_worker_id"]
    prefill, decode = cluster.workers["prefill"], cluster.workers["decode"]
    assert prefill.metric("trtserve_dynamo_computed_prompt_tokens_total") >= sum(map(len, prompts))
    assert decode.metric("trtserve_dynamo_computed_prompt_tokens_total") == 0  # every prompt's KV was pulled
    assert decode.metric("trtserve_dynamo_local_prefills_total") == 0
    _idle(cluster)


def test_cancelled_requests_free_blocks_on_both_sides(cluster):
    prompt = random_prompts(1, seed=13, lo=200, hi=201)[0]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0, "stream": True}
    for read_bytes in (0, 1, 400):  # before the prefill answers, at the hand-off, while decoding
        req = urllib.request.Request(
            cluster.frontend.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        r = urllib.request.urlopen(req, timeout=60)
        if read_bytes:
            r.read(read_bytes)
        r.close()
    _idle(cluster)
    tokens, _ = cluster.complete(prompt[:20], 4)  # and the workers still serve
    assert len(tokens) == 4


def test_decode_computes_the_prompt_when_the_prefill_kv_cannot_be_pulled(cluster, tiny_llama_engine, monkeypatch):
    """A decode request naming a prefill worker that is gone: Dynamo's own client sends it straight to the
    decode worker, which computes the prompt itself and still gives the engine's tokens."""
    from dynamo._core import DistributedRuntime

    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    prompt = random_prompts(1, seed=19, lo=40, hi=41)[0]
    gone = {"key": "k", "address": "tcp://127.0.0.1:1", "num_tokens": len(prompt), "first_token": 0, "transport": "shm"}
    request = {
        "token_ids": prompt,
        "stop_conditions": {"max_tokens": 8},
        "sampling_options": {"temperature": 0},
        "prefill_result": {"disaggregated_params": {"trtserve": gone}},
    }

    async def main():
        runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp", event_plane="zmq")
        try:
            client = await runtime.endpoint("dynamo.backend.generate").client()
            await asyncio.wait_for(client.wait_for_instances(), 30)
            tokens = []
            async for item in await client.round_robin(request):
                tokens += item.data()["token_ids"]
            return tokens
        finally:
            runtime.shutdown()

    before = cluster.workers["decode"].metric("trtserve_dynamo_local_prefills_total")
    assert asyncio.run(asyncio.wait_for(main(), 60)) == reference_greedy(tiny_llama_engine, [prompt], 8)[0]
    assert cluster.workers["decode"].metric("trtserve_dynamo_local_prefills_total") == before + 1
    _idle(cluster)


def test_a_killed_prefill_worker_gives_errors_not_hangs(cluster):
    cluster.workers["prefill"].kill()
    prompt = random_prompts(1, seed=17, lo=30, hi=31)[0]
    codes = []
    for _ in range(3):
        start = time.monotonic()
        try:
            post(cluster.frontend.url + "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 4}, 60)
            codes.append(200)
        except urllib.error.HTTPError as err:
            codes.append(err.code)
        assert time.monotonic() - start < 60
    assert all(c >= 500 or c == 200 for c in codes), codes
    assert any(c >= 500 for c in codes), "a request succeeded with no prefill worker and no error"
