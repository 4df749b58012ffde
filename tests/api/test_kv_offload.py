"""The second KV tier and sleep/wake on a live server, through the official openai client: a server
restarted on the same state dir serves its first request's prefix from the tier it left behind; a
sleep lets the requests in flight finish, answers 503 with Retry-After until woken, and a woken
server answers as before; the start-up breakdown is on /metrics."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from conftest import Server
from helpers import random_prompts

pytestmark = pytest.mark.timeout(300)
T = 60  # seconds any one client call may take
GREEDY = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=T, max_retries=0)


def metric(server: Server, name: str, labels: str) -> float:
    for line in httpx.get(f"{server.url}/metrics", timeout=T).text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def test_a_restarted_server_reuses_the_prefixes_it_left(tiny_llama_engine, model_name, tmp_path):
    state = tmp_path / "state"
    args = ("--kv-offload", "4MiB", "--state-dir", str(state), "--kv-cache-memory", "1MiB")
    prompt = random_prompts(1, seed=81, lo=80, hi=81)[0]  # (80 - 1) // 16 = 4 reusable blocks
    first = Server(tiny_llama_engine, *args, log=tmp_path / "first.log")
    try:
        before = client(first).completions.create(model=model_name, prompt=prompt, max_tokens=8, **GREEDY)
        assert before.usage.prompt_tokens_details.cached_tokens == 0
    finally:
        first.stop()  # a clean stop (SIGINT) writes the tier's index
    assert list(state.glob("kv-tier/*/*/index.json"))
    second = Server(tiny_llama_engine, *args, log=tmp_path / "second.log")
    try:
        after = client(second).completions.create(model=model_name, prompt=prompt, max_tokens=8, **GREEDY)
        assert after.usage.prompt_tokens_details.cached_tokens == 64  # its first request, warm
        assert after.choices[0].text == before.choices[0].text
        assert metric(second, "trtserve_prefix_cache_tier_hits_total", 'tier="2"') == 64
        assert metric(second, "trtserve_kv_offload_restores_total", "") == 4
    finally:
        second.stop()


def test_sleep_drains_refuses_and_wake_up_serves_again(tiny_llama_engine, model_name, tmp_path):
    s = Server(tiny_llama_engine, "--kv-cache-memory", "64MiB", "--admin-key", "adm", log=tmp_path / "s.log")
    admin = {"Authorization": "Bearer adm"}
    c = client(s)
    prompts = random_prompts(4, seed=90, lo=20, hi=30)
    try:
        phases = ("imports", "verify", "weights", "kv_cache", "warmup", "other", "total")
        startup = {p: metric(s, "trtserve_startup_seconds", f'phase="{p}"') for p in phases}  # start-to-ready
        assert startup["total"] > 0 and "start-up: ready in" in s.log.read_text()
        ref = c.completions.create(model=model_name, prompt=prompts[0], max_tokens=16, **GREEDY)
        assert httpx.post(f"{s.url}/admin/sleep", timeout=T).status_code == 401  # the admin key guards it
        with ThreadPoolExecutor(4) as pool:
            running = [
                pool.submit(c.completions.create, model=model_name, prompt=p, max_tokens=200, **GREEDY) for p in prompts
            ]
            deadline = time.time() + T
            while not any(f.done() for f in running) and time.time() < deadline:
                if metric(s, "trtserve_num_requests_running", "") > 0:  # in flight: sleep now
                    break
                time.sleep(0.01)
            slept = httpx.post(f"{s.url}/admin/sleep", headers=admin, timeout=T)
            assert slept.status_code == 200 and slept.json()["asleep"] is True
            assert all(f.result(T).choices[0].finish_reason == "length" for f in running)  # they finished
        assert httpx.get(f"{s.url}/v2/health/ready", timeout=T).status_code == 400
        with pytest.raises(openai.APIStatusError) as refused:
            c.completions.create(model=model_name, prompt=prompts[0], max_tokens=4, **GREEDY)
        assert refused.value.status_code == 503 and refused.value.response.headers["retry-after"] == "5"
        assert "asleep" in refused.value.message
        assert metric(s, "trtserve_kv_tier_bytes", 'tier="1"') == 0  # the KV cache holds nothing
        woke = httpx.post(f"{s.url}/admin/wake_up", headers=admin, timeout=T)
        assert woke.status_code == 200 and woke.json()["asleep"] is False
        assert httpx.get(f"{s.url}/v2/health/ready", timeout=T).status_code == 200
        again = c.completions.create(model=model_name, prompt=prompts[0], max_tokens=16, **GREEDY)
        assert again.choices[0].text == ref.choices[0].text
    finally:
        s.stop()
