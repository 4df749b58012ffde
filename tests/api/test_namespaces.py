"""Versioned prefix namespaces on a live server: a newer context_version gets no cached tokens from
an older one and an equal one does (OpenAI and KServe), metrics by namespace, and
`POST /v1/cache/invalidate` under load: blocks freed at once, running requests undisturbed."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from helpers import random_prompts

pytestmark = pytest.mark.timeout(300)


def _complete(server, prompt, namespace=None, version=None, max_tokens=1, **kw) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True, **kw}
    if namespace is not None:
        body["cache_namespace"] = namespace
    if version is not None:
        body["context_version"] = version
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _cached(resp: dict) -> int:
    return resp["usage"]["prompt_tokens_details"]["cached_tokens"]


def _counter(server, name: str, namespace: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'namespace="{namespace}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _invalidate(server, **body) -> dict:
    r = httpx.post(f"{server.url}/v1/cache/invalidate", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_newer_context_version_gets_no_cached_tokens_from_an_older_one(server):
    ns = f"docs-{uuid.uuid4().hex[:8]}"
    prompt = random_prompts(1, seed=70, lo=40, hi=41)[0]  # 2 reusable blocks of 16
    refused = server.metric("trtserve_prefix_cache_version_refusals_total")
    assert _cached(_complete(server, prompt, ns, 7)) == 0
    assert _cached(_complete(server, prompt, ns, 7)) == 32  # an equal version reuses
    assert _cached(_complete(server, prompt, ns, 8)) == 0  # a newer one never reuses version 7's blocks
    assert server.metric("trtserve_prefix_cache_version_refusals_total") == refused + 1
    assert _cached(_complete(server, prompt, ns, 8)) == 32
    assert _cached(_complete(server, prompt, ns, 6)) == 0  # nor does an older one
    assert _cached(_complete(server, prompt, f"{ns}-other", 7)) == 0  # nor another namespace
    assert _cached(_complete(server, prompt)) == 0  # nor a request naming none
    assert _counter(server, "trtserve_prefix_cache_namespace_hits_total", ns) == 64
    assert _counter(server, "trtserve_prefix_cache_namespace_misses_total", ns) == 5 * 40 - 64


def test_kserve_parameters_carry_namespace_and_version(server, model_name):
    ns = f"kserve-{uuid.uuid4().hex[:8]}"
    text = "Paged attention keeps the KV cache in fixed-size blocks. " * 2
    url = f"{server.url}/v2/models/{model_name}/generate"
    for version in (1, 1, 2):
        body = {"text_input": text, "max_tokens": 1, "parameters": {"cache_namespace": ns, "context_version": version}}
        assert httpx.post(url, json=body, timeout=60).status_code == 200
    hits = _counter(server, "trtserve_prefix_cache_namespace_hits_total", ns)
    assert hits > 0 and hits % 16 == 0  # only the second (equal version) request hit
    infer = {
        "inputs": [{"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [text]}],
        "parameters": {"cache_namespace": ns, "context_version": 2},
    }
    assert httpx.post(f"{server.url}/v2/models/{model_name}/infer", json=infer, timeout=60).status_code == 200
    assert _counter(server, "trtserve_prefix_cache_namespace_hits_total", ns) == 2 * hits
    bad = {"text_input": text, "parameters": {"context_version": -1}}
    assert httpx.post(url, json=bad, timeout=60).status_code == 400


def test_invalidation_under_load_frees_blocks_and_leaves_running_requests_alone(server):
    ns, other = f"kb-{uuid.uuid4().hex[:8]}", f"keep-{uuid.uuid4().hex[:8]}"
    longs = random_prompts(4, seed=71, lo=40, hi=41)
    idle = random_prompts(2, seed=72, lo=40, hi=41)  # cached in ns but not running: freed at once
    kept = random_prompts(1, seed=73, lo=40, hi=41)[0]
    refs = [_complete(server, p, max_tokens=200)["choices"][0]["text"] for p in longs]  # undisturbed outputs
    for p in longs + idle:
        _complete(server, p, ns, 1)
    _complete(server, kept, other, 1)
    server.wait_idle()
    invalidations = server.metric("trtserve_prefix_cache_invalidations_total")
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(_complete, server, p, ns, 1, max_tokens=200) for p in longs]
        while server.metric("trtserve_num_requests_running") < 4:
            assert not any(f.done() for f in running), "the requests finished before the invalidation"
        cached = server.metric("trtserve_kv_cache_cached_blocks")
        dropped = _invalidate(server, namespace=ns)["blocks_invalidated"]
        # idle's 4 blocks were unreferenced: they are free now; the running requests' stay theirs
        assert server.metric("trtserve_kv_cache_cached_blocks") <= cached - 4
        outs = [f.result() for f in running]
    assert dropped >= 2 * len(longs + idle)
    assert [o["choices"][0]["text"] for o in outs] == refs
    assert all(_cached(o) == 32 and o["usage"]["completion_tokens"] == 200 for o in outs)
    assert server.metric("trtserve_prefix_cache_invalidations_total") == invalidations + 1
    server.wait_idle()
    assert all(_cached(_complete(server, p, ns, 1)) == 0 for p in longs + idle)  # nothing of ns was left
    assert _cached(_complete(server, kept, other, 1)) == 32  # another namespace keeps its prefixes


def test_invalidate_before_version_keeps_newer_versions(server):
    ns = f"v-{uuid.uuid4().hex[:8]}"
    old, new = random_prompts(2, seed=74, lo=40, hi=41)
    _complete(server, old, ns, 1)
    _complete(server, new, ns, 2)
    server.wait_idle()
    assert _invalidate(server, namespace=ns, before_version=2)["blocks_invalidated"] == 2
    assert _cached(_complete(server, old, ns, 1)) == 0
    assert _cached(_complete(server, new, ns, 2)) == 32
    r = httpx.post(f"{server.url}/v1/cache/invalidate", json={"before_version": 2}, timeout=30)
    assert r.status_code == 400 and "namespace" in r.json()["error"]["message"]
