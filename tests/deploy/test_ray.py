"""trtserve under Ray Serve on this machine: 2 replicas of the tiny model behind Ray's HTTP proxy,
driven by the official `openai` client; a replica killed mid-load; autoscaling under a burst.

Marker `ray`; skipped where Ray is not installed or cannot start (conftest.py)."""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import time

import openai
import pytest
from ray_helpers import replica_states, wait_for

from trtserve.engine.sampling import SamplingParams

# A stream cut mid-body is a visible failure too: the openai client raises its transport's error
# there (httpx, or httpx2 for openai 3.x) rather than an APIError.
CUT = tuple(importlib.import_module(m).TransportError for m in ("httpx", "httpx2") if importlib.util.find_spec(m))

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]  # the first test also starts Ray and 2 replicas
BLOCK = 16  # tokens_per_block of the test engine (conftest.batch4_engine)


def deploy(engine, config: dict | None = None, **settings):
    """`config`: run-config fields besides the small KV cache and deadline every test uses."""
    from ray import serve

    from trtserve.deploy.ray import APP_NAME, build_app
    from trtserve.deploy.settings import RaySettings
    from trtserve.serve.config import ServeConfig

    cfg = ServeConfig(engine={"kv_cache_memory": "32MiB"}, request_timeout=60, **(config or {}))
    serve.run(build_app(engine, cfg, RaySettings(replica_cpus=0.5, **settings)), name=APP_NAME, route_prefix="/")


@pytest.fixture(scope="module")
def two_replicas(ray_serve, batch4_engine):
    deploy(batch4_engine, replicas=2, prefix_affinity=True)
    return openai.OpenAI(base_url=f"{ray_serve}/v1", api_key="unused", max_retries=0, timeout=60)


def test_two_replicas_serve_the_openai_api(two_replicas, batch4_engine):
    from trtserve import LLM
    from trtserve.deploy.ray import APP_NAME, REPLICA

    assert replica_states(APP_NAME, REPLICA) == {"RUNNING": 2}
    client, name = two_replicas, batch4_engine.name
    assert [m.id for m in client.models.list().data] == [name]
    prompt = "The quick brown fox"
    expected = LLM(batch4_engine, kv_cache_memory=16 << 20).generate(
        prompt, SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    )[0]
    r = client.completions.create(
        model=name, prompt=prompt, max_tokens=10, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].text == expected.text and r.choices[0].finish_reason == "length"
    messages = [{"role": "user", "content": "Paged attention keeps the KV cache"}]
    whole = client.chat.completions.create(model=name, messages=messages, max_tokens=8, temperature=0)
    parts = client.chat.completions.create(model=name, messages=messages, max_tokens=8, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in parts if c.choices) == whole.choices[0].message.content
    with pytest.raises(openai.BadRequestError):  # the replica's own 400 comes back through both hops
        client.completions.create(model=name, prompt="x", max_tokens=10_000)


def test_shared_prefixes_hit_the_cache_of_one_replica(two_replicas, batch4_engine):
    """Sequential requests (so no replica is ever busy): each prefix's later requests must land where
    its first one filled the cache, on whichever of the two replicas that was."""
    client, name = two_replicas, batch4_engine.name
    prefixes = [
        "Continuous batching lets requests join and leave at every step. " * 3,
        "A model server turns checkpoints into engines. " * 3,
    ]
    for p in prefixes:
        usages = [
            client.completions.create(model=name, prompt=p + q, max_tokens=2, temperature=0).usage
            for q in ("one", "two", "three", "four")
        ]
        cached = [u.prompt_tokens_details.cached_tokens for u in usages]
        assert all(c >= 2 * BLOCK for c in cached[1:]), cached


def _stream(client, name: str, i: int, started=None, max_tokens: int = 24) -> str:
    """'ok' for a complete answer, 'error' for one that failed visibly; never a silently cut answer."""
    try:
        chunks = client.completions.create(
            model=name,
            prompt=f"request {i}",
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        finish, n = None, 0
        for c in chunks:
            n += 1
            if started is not None:
                started.set()
            finish = c.choices[0].finish_reason or finish if c.choices else finish
    except (openai.APIError, openai.APIConnectionError, *CUT):
        return "error"
    assert finish == "length", f"a stream ended without an error and without finishing ({n} chunks)"
    return "ok"


def _replica_names() -> set[str]:
    import ray

    from trtserve.deploy.ray import REPLICA

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if REPLICA in a["name"]}


def test_killed_replica_fails_its_requests_honestly_and_comes_back(two_replicas, batch4_engine):
    import threading

    import ray

    from trtserve.deploy.ray import APP_NAME, REPLICA

    client, name = two_replicas, batch4_engine.name
    before = _replica_names()
    assert len(before) == 2
    victim = sorted(before)[0]
    started = threading.Event()
    with cf.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(_stream, client, name, i, started, 64) for i in range(32)]
        assert started.wait(60)  # mid-load: streams are running on both replicas
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        killed = time.monotonic()
        outcomes = [f.result() for f in futures]
    assert set(outcomes) <= {"ok", "error"} and "ok" in outcomes

    def replaced():
        names = _replica_names()
        return victim not in names and len(names) == 2 and replica_states(APP_NAME, REPLICA) == {"RUNNING": 2}

    wait_for(replaced, 120, "a new replica in place of the killed one")
    back = time.monotonic() - killed
    print(f"\nkilled replica replaced after {back:.1f} s; {outcomes.count('ok')} ok, {outcomes.count('error')} failed")
    r = client.completions.create(model=name, prompt="after", max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"


def test_autoscaling_follows_a_burst(ray_serve, batch4_engine):
    """Up to 2 replicas while a burst lasts (8 clients for target_ongoing_requests=1), back to 1 after;
    no request fails while a replica is added."""
    import threading

    from trtserve.deploy.ray import APP_NAME, REPLICA

    deploy(
        batch4_engine,
        min_replicas=1,
        max_replicas=2,
        target_ongoing_requests=1,
        prefix_affinity=False,
        upscale_delay_s=0,
        downscale_delay_s=2,
    )
    assert replica_states(APP_NAME, REPLICA) == {"RUNNING": 1}
    client = openai.OpenAI(base_url=f"{ray_serve}/v1", api_key="unused", max_retries=0, timeout=120)
    name, stop = batch4_engine.name, threading.Event()

    def client_loop(i: int) -> list[str]:
        outcomes = []
        while not stop.is_set():
            outcomes.append(_stream(client, name, i, max_tokens=32))
        return outcomes

    with cf.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(client_loop, i) for i in range(8)]
        try:
            wait_for(
                lambda: replica_states(APP_NAME, REPLICA) == {"RUNNING": 2}, 90, "a second replica under the burst"
            )
            time.sleep(2)  # the new replica takes part in the burst
        finally:
            stop.set()
        outcomes = [o for f in futures for o in f.result()]
    assert outcomes and set(outcomes) == {"ok"}  # scaling up loses nothing
    wait_for(lambda: replica_states(APP_NAME, REPLICA) == {"RUNNING": 1}, 60, "scaling back to one replica")


def test_a_traced_request_continues_the_callers_trace(ray_serve, batch4_engine):
    """Through Ray's proxy, the prefix frontend and a replica to an OTLP receiver: the frontend's span continues
    the caller's traceparent, the replica's continues the frontend's, the generation's spans are the replica's."""
    import httpx
    from otlp_receiver import INTERNAL, SERVER, Receiver, attrs

    trace_id, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    with Receiver() as receiver:
        deploy(batch4_engine, {"otlp_traces_endpoint": receiver.endpoint}, replicas=1, prefix_affinity=True)
        body = {"model": batch4_engine.name, "prompt": "Spans cross processes", "max_tokens": 4, "temperature": 0}
        r = httpx.post(
            f"{ray_serve}/v1/completions", json=body, headers={"traceparent": f"00-{trace_id}-{parent}-01"}, timeout=60
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-trace-id"] == trace_id
        gen = f"text_completion {batch4_engine.name}"
        want = {"POST /v1/completions": 2, gen: 1, "prefill": 1, "decode": 1}  # the frontend's and the replica's
        spans = receiver.trace(trace_id, want, timeout=60)
    by_id = {s.span_id: s for group in spans.values() for s in group}
    frontend, replica = sorted(spans["POST /v1/completions"], key=lambda s: "trtserve.ray.deployment" not in attrs(s))
    assert attrs(frontend)["trtserve.ray.deployment"] == "PrefixFrontend" and frontend.kind == replica.kind == SERVER
    assert frontend.parent_span_id.hex() == parent and replica.parent_span_id == frontend.span_id
    assert attrs(frontend)["http.response.status_code"] == attrs(replica)["http.response.status_code"] == 200
    (g,) = spans[gen]
    assert g.kind == INTERNAL and g.parent_span_id == replica.span_id
    for name in ("admission", "queue", "prefill", "decode"):
        chain, s = [], spans[name][0]
        while s.parent_span_id in by_id:  # up the tree to the caller's span, which no process here sent
            s = by_id[s.parent_span_id]
            chain.append(s.span_id)
        assert chain == [g.span_id, replica.span_id, frontend.span_id] and s.parent_span_id.hex() == parent
