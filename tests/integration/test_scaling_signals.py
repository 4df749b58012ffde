"""serve/load.py's autoscaling signals and deploy/'s routing and replica arithmetic, on plain ints."""

from __future__ import annotations

import pytest

from trtserve.deploy.affinity import prefix_key, prompt_tokens, rank_replicas
from trtserve.deploy.settings import RaySettings
from trtserve.engine.errors import UserError
from trtserve.engine.stats import EngineStats, KVCacheStats
from trtserve.serve.admission import Admission
from trtserve.serve.load import LoadTracker, TokenRate


def idle_stats(kv_utilization: float = 0.0) -> EngineStats:
    return EngineStats(kv_cache=KVCacheStats(utilization=kv_utilization))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_rate_is_a_rolling_rate_over_the_window():
    clock = Clock()
    rate = TokenRate(window=10.0, clock=clock)
    assert rate.observe(0, 0) == (0.0, 0.0)
    for _ in range(20):  # 50 prompt and 10 generated tokens a second, observed every second
        clock.now += 1
        p, g = rate.observe(int(50 * (clock.now - 100)), int(10 * (clock.now - 100)))
    assert (p, g) == (50.0, 10.0)
    assert len(rate.samples) <= 12  # only the window (+ its anchor) is kept
    clock.now += 5  # idle for 5 s: the rate falls, it does not stay at the last value
    p, g = rate.observe(1000, 200)
    assert p == pytest.approx(50 * 5 / 10) and g == pytest.approx(10 * 5 / 10)
    clock.now += 60  # a rare observer (a 60 s scrape) gets the rate since its last look
    assert rate.observe(1600, 200) == pytest.approx((10.0, 0.0))


def test_load_is_the_closest_limit():
    gate = Admission(max_requests=10, max_tokens=1000)
    stats = idle_stats(kv_utilization=0.25)
    tracker = LoadTracker(lambda: stats, gate, batch_size=4)
    assert tracker.signals().load == 0.25  # idle but for the KV cache
    tickets = [gate.enter(100) for _ in range(3)]  # 3 waiting, 300 prompt tokens
    s = tracker.signals()
    assert (s.queue_requests, s.queue_tokens) == (3, 300)
    assert s.load == pytest.approx(0.75)  # 3 in flight of a batch of 4
    for t in tickets[:2]:
        t.started()  # generating: no longer queued, still in flight
    assert tracker.signals().queue_tokens == 100
    tickets += [gate.enter(100) for _ in range(5)]  # 8 in flight for a batch of 4: saturated
    assert tracker.signals().load == pytest.approx(2.0)
    big = LoadTracker(lambda: stats, Admission(10, 1000), batch_size=None)
    big.admission.enter(900)
    assert big.signals().load == pytest.approx(0.9)  # the token limit is the closest one


def test_prefix_key_is_the_first_block():
    a, b = list(range(40)), list(range(32)) + [99] * 8
    assert prefix_key(a, 16) == prefix_key(b, 16) == prefix_key(a[:16], 16)
    assert prefix_key(a, 16) != prefix_key([1, *a], 16)
    assert prefix_key(a[:15], 16) is None  # less than a block: nothing to reuse


def test_rendezvous_ranking_moves_only_the_keys_of_a_removed_replica():
    replicas = ["r1", "r2", "r3"]
    keys = range(300)
    before = {k: rank_replicas(k, replicas)[0] for k in keys}
    assert set(before.values()) == set(replicas)  # every replica gets keys
    after = {k: rank_replicas(k, ["r1", "r3"])[0] for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "r2")
    assert rank_replicas(7, replicas) == rank_replicas(7, list(reversed(replicas)))


class WordTokenizer:
    def encode(self, text):
        return [len(w) for w in text.split()]

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return [len(m["content"]) for m in messages] + [0]


def test_prompt_tokens_reads_the_openai_bodies():
    tok = WordTokenizer()
    assert prompt_tokens("/v1/completions", b'{"prompt": "ab c"}', tok) == [2, 1]
    assert prompt_tokens("/v1/completions", b'{"prompt": [5, 6]}', tok) == [5, 6]
    chat = b'{"messages": [{"role": "user", "content": "hey"}]}'
    assert prompt_tokens("/v1/chat/completions", chat, tok) == [3, 0]
    assert prompt_tokens("/v1/completions", b'{"prompt": ["a", "b"]}', tok) is None  # a batch: no one key
    assert prompt_tokens("/v1/completions", b"not json", tok) is None
    assert prompt_tokens("/v2/models/m/generate", b'{"text_input": "x"}', tok) is None


def test_replica_limits_come_from_the_batch():
    s = RaySettings(min_replicas=1, max_replicas=4)
    assert s.ongoing_limits(8) == (16, 6.0)
    opts = s.deployment_options(8, drain_timeout=20)
    assert opts["max_ongoing_requests"] == 16 and opts["graceful_shutdown_timeout_s"] == 20
    assert opts["autoscaling_config"]["target_ongoing_requests"] == 6.0
    fixed = RaySettings(replicas=2).deployment_options(8, 20)
    assert fixed["num_replicas"] == 2 and "autoscaling_config" not in fixed
    with pytest.raises(UserError, match="--min-replicas 3 is above --max-replicas 2"):
        RaySettings(min_replicas=3, max_replicas=2)


def test_replica_flags_are_refused_in_one_sentence(tmp_path):
    from click.testing import CliRunner

    from trtserve.cli.run import command

    r = CliRunner().invoke(command, [str(tmp_path), "--replicas", "2"])
    assert r.exit_code == 2 and "need --ray" in r.output
    r = CliRunner().invoke(command, [str(tmp_path), "--ray", "--replicas", "2", "--max-replicas", "3"])
    assert r.exit_code == 2 and "either --replicas N" in r.output


def test_forwarded_call_streams_the_app_and_cancels_it_when_closed():
    """deploy/forward.py: what the prefix frontend relies on to carry a request to a replica's app."""
    import asyncio

    from trtserve.deploy.forward import HTTPCall, ResponseStart, call_asgi

    seen: dict = {}

    async def app(scope, receive, send):
        seen["body"] = (await receive())["body"]
        seen["path"], seen["query"] = scope["path"], scope["query_string"]
        await send({"type": "http.response.start", "status": 201, "headers": [(b"x-a", b"1")]})
        try:
            for i in range(1000):
                await send({"type": "http.response.body", "body": b"chunk%d" % i, "more_body": True})
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    async def first_two():
        it = call_asgi(app, HTTPCall("POST", "/v1/completions", b"a=1", [], b'{"prompt": "x"}'))
        parts = [await it.__anext__() for _ in range(3)]
        await it.aclose()  # the client went away
        return parts

    parts = asyncio.run(first_two())
    assert parts == [ResponseStart(201, [(b"x-a", b"1")]), b"chunk0", b"chunk1"]
    assert seen == {"body": b'{"prompt": "x"}', "path": "/v1/completions", "query": b"a=1", "cancelled": True}
