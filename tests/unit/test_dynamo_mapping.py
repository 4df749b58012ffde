"""Dynamo's request and response dicts <-> the engine's messages (trtserve/dynamo/mapping.py): pure functions."""

import pytest

from trtserve.dynamo.mapping import (
    block_hash,
    chunk_of,
    eos_ids,
    first_token_finishes,
    guided_of,
    prompt_of,
    sampling_params,
)
from trtserve.engine.errors import UserError
from trtserve.engine.ids import RequestId
from trtserve.engine.messages import TokenDelta
from trtserve.engine.sampling import GuidedDecoding, SamplingParams, TokenLogprob


def test_sampling_options_and_stop_conditions_map_to_sampling_params():
    request = {
        "token_ids": [1, 2, 3],
        "sampling_options": {"temperature": 0.5, "top_p": 0.9, "top_k": -1, "seed": 7, "n": None},
        "stop_conditions": {"max_tokens": 9, "min_tokens": 2, "stop_token_ids": [5], "stop_token_ids_hidden": [2, 5]},
        "output_options": {"logprobs": 3},
        "eos_token_ids": [2],
    }
    p = sampling_params(request, default_max_tokens=100)
    want = SamplingParams(temperature=0.5, top_p=0.9, seed=7, max_tokens=9, min_tokens=2, stop_token_ids=[5, 2])
    assert p == want.model_copy(update={"logprobs": 3})
    assert eos_ids(request) == [2, 5]
    # no max_tokens: what the engine has room for; ignore_eos keeps the hidden EOS ids out of the stop ids
    request["stop_conditions"] = {"ignore_eos": True, "stop_token_ids_hidden": [2]}
    p = sampling_params(request, default_max_tokens=100)
    assert (p.max_tokens, p.ignore_eos, p.stop_token_ids) == (100, True, [])


def test_bad_requests_are_one_sentence():
    with pytest.raises(UserError, match="no token_ids"):
        prompt_of({"token_ids": []})
    with pytest.raises(UserError, match="bad sampling option temperature"):
        sampling_params({"token_ids": [1], "sampling_options": {"temperature": -1}}, 10)


def test_guided_decoding():
    assert guided_of({"json": {"type": "object"}}) == GuidedDecoding(kind="json_schema", spec='{"type": "object"}')
    assert guided_of({"choice": ["a", "b"]}) == GuidedDecoding(kind="choice", spec='["a", "b"]')
    assert guided_of({"regex": "[0-9]+"}) == GuidedDecoding(kind="regex", spec="[0-9]+")
    assert guided_of(None) is None and guided_of({}) is None


def test_chunks_carry_finish_usage_and_logprobs():
    rid = RequestId.new()
    assert chunk_of(TokenDelta(rid, 0, [4, 5]), 2) == {"token_ids": [4, 5], "index": 0}
    lp = TokenLogprob(token_id=6, logprob=-0.5, rank=1, top=[(6, -0.5), (7, -1.5)])
    last = chunk_of(TokenDelta(rid, 1, [6], logprobs=[lp], finish_reason="abort", num_prompt_tokens=3), 3)
    assert last["finish_reason"] == "cancelled" and last["index"] == 1
    assert last["completion_usage"]["total_tokens"] == 6
    assert last["log_probs"] == [-0.5]
    assert last["top_logprobs"] == [
        [{"rank": 1, "token_id": 6, "logprob": -0.5}, {"rank": 2, "token_id": 7, "logprob": -1.5}]
    ]


def test_the_prefill_token_can_finish_a_decode():
    params = SamplingParams(max_tokens=5)
    assert first_token_finishes(2, 10, params, [2], 100) == "stop"
    assert first_token_finishes(3, 10, params, [2], 100) is None
    assert first_token_finishes(3, 10, params.model_copy(update={"max_tokens": 1}), [2], 100) == "length"


def test_block_hashes_are_signed_64_bit_and_stable():
    key = bytes(range(16))
    assert block_hash(key) == block_hash(bytes(key)) == int.from_bytes(key[:8], "little", signed=True)
    assert -(2**63) <= block_hash(b"\xff" * 16) < 2**63


def test_kv_events_cross_to_the_event_loop_in_order():
    """The engine thread's events reach Dynamo's publisher on the loop's thread, in order; a cleared
    cache removes every block still published."""
    import asyncio
    import threading

    from trtserve.dynamo.kv_publisher import KVEventBridge
    from trtserve.engine.kv_cache_events import PrefixCleared, PrefixRemoved, PrefixStored

    class Publisher:
        def __init__(self):
            self.calls, self.threads = [], set()

        def publish_stored(self, **kw):
            self.calls.append(("stored", kw["block_hashes"], kw["parent_hash"], kw["token_ids"]))
            self.threads.add(threading.get_ident())

        def publish_removed(self, **kw):
            self.calls.append(("removed", kw["block_hashes"]))
            self.threads.add(threading.get_ident())

    k1, k2, k3 = (bytes([i]) * 16 for i in (1, 2, 3))
    events = [
        PrefixStored(k1, None, (1, 2), 0, "ns", 1, None),
        PrefixStored(k2, k1, (3, 4), 1, "ns", 1, None),
        PrefixStored(k3, k2, (5, 6), 2, "ns", 1, None),
        PrefixRemoved(k2, 1, True),
        PrefixCleared(),
    ]
    publisher = Publisher()

    async def main():
        bridge = KVEventBridge(asyncio.get_running_loop(), publisher)
        engine_thread = threading.Thread(target=lambda: [bridge.on_event(e) for e in events])
        engine_thread.start()
        await asyncio.to_thread(engine_thread.join)
        await asyncio.sleep(0.05)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    h1, h2, h3 = (block_hash(k) for k in (k1, k2, k3))
    assert publisher.calls == [
        ("stored", [h1], None, [1, 2]),
        ("stored", [h2], h1, [3, 4]),
        ("stored", [h3], h2, [5, 6]),
        ("removed", [h2]),
        ("removed", sorted([h1, h3])),
    ]
    assert publisher.threads == {loop_thread}
