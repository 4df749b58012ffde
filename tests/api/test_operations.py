"""Operating the server: admission (429), deadlines (504), disconnects, API keys, body limits, drain."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest
from conftest import Server

LONG = {"prompt": "x", "max_tokens": 200, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def busy_server(tiny_llama_engine, tmp_path_factory):
    """One sequence at a time and a queue of one: easy to fill."""
    cfg = tmp_path_factory.mktemp("cfg") / "run.yaml"
    cfg.write_text("max_queued_requests: 1\nengine:\n  max_batch_size: 1\n  kv_cache_memory: 32MiB\n")
    s = Server(tiny_llama_engine, "--config", str(cfg), log=tmp_path_factory.mktemp("logs") / "busy.log")
    yield s
    s.stop()


def test_full_queue_gets_429_with_retry_after(busy_server, model_name):
    async def main():
        async with httpx.AsyncClient(base_url=busy_server.url, timeout=60) as c:
            return await asyncio.gather(
                *(c.post("/v1/completions", json={"model": model_name, **LONG}) for _ in range(4))
            )

    rs = asyncio.run(main())
    codes = sorted(r.status_code for r in rs)
    assert 200 in codes and 429 in codes, codes
    assert all(r.json()["usage"]["completion_tokens"] == 200 for r in rs if r.status_code == 200)
    rejected = next(r for r in rs if r.status_code == 429)
    assert rejected.headers["retry-after"] == "1" and "queue is full" in rejected.json()["error"]["message"]
    busy_server.wait_idle()


def test_deadline_gives_504_and_frees_blocks(server, model_name):
    r = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": model_name, **LONG, "max_tokens": 250, "prompt": "y", "timeout": 0.05},
    )
    assert r.status_code == 504 and "deadline" in r.json()["error"]["message"]
    server.wait_idle()
    with httpx.stream(
        "POST",
        f"{server.url}/v1/completions",
        json={"model": model_name, **LONG, "max_tokens": 250, "stream": True, "timeout": 0.05},
    ) as s:
        lines = [line for line in s.iter_lines() if line.startswith("data:")]
    assert '"code":504' in lines[-2] and lines[-1] == "data: [DONE]"
    server.wait_idle()


def test_disconnect_aborts_streaming_and_non_streaming(server, model_name):
    body = {"model": model_name, **LONG, "max_tokens": 250}
    with httpx.stream("POST", f"{server.url}/v1/completions", json={**body, "stream": True}) as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                break  # leave after the first chunk
    server.wait_idle(timeout=5)
    with pytest.raises(httpx.ReadTimeout):  # 16 sequences of 250 tokens: far longer than the client waits
        httpx.post(f"{server.url}/v1/completions", json={**body, "n": 16}, timeout=0.1)
    server.wait_idle(timeout=5)
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_api_key_body_limit_and_cors_off(tiny_llama_engine, tmp_path, model_name):
    s = Server(
        tiny_llama_engine, "--kv-cache-memory", "8MiB", env={"TRTSERVE_API_KEY": "s3cret"}, log=tmp_path / "auth.log"
    )
    try:
        assert httpx.get(f"{s.url}/health").status_code == 200
        assert httpx.get(f"{s.url}/v2/health/ready").status_code == 200
        r = httpx.get(f"{s.url}/v1/models")
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(f"{s.url}/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(f"{s.url}/v2/models/{model_name}", headers={"Authorization": "Bearer wrong"}).json() == {
            "error": "missing or wrong API key; send the header `Authorization: Bearer <key>`"
        }
        ok = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{s.url}/v1/models", headers=ok).status_code == 200
        big = httpx.post(f"{s.url}/v1/completions", headers=ok, json={"model": model_name, "prompt": "x" * (9 << 20)})
        assert big.status_code == 413
        pre = httpx.options(
            f"{s.url}/v1/models",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET", **ok},
        )
        assert "access-control-allow-origin" not in pre.headers
    finally:
        s.stop()


def test_sigterm_drains_in_flight_then_exits_0(tiny_llama_engine, tmp_path, model_name):
    s = Server(tiny_llama_engine, "--kv-cache-memory", "8MiB", log=tmp_path / "drain.log")
    chunks = []

    async def main():
        async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:

            async def stream():
                async with c.stream(
                    "POST", "/v1/completions", json={"model": model_name, **LONG, "max_tokens": 150, "stream": True}
                ) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data:"):
                            chunks.append(line)

            task = asyncio.create_task(stream())
            while not chunks:
                await asyncio.sleep(0.01)
            s.proc.send_signal(signal.SIGTERM)
            for _ in range(500):  # until the server has seen the signal (no fixed sleep: the stream may end first)
                ready = await c.get("/v2/health/ready")
                if ready.status_code != 200:
                    break
                await asyncio.sleep(0.002)
            late = await c.post("/v1/completions", json={"model": model_name, "prompt": "late", "max_tokens": 2})
            await task
            return late, ready

    late, ready = asyncio.run(main())
    assert late.status_code == 503 and ready.status_code == 400
    assert chunks[-1] == "data: [DONE]" and '"finish_reason":"length"' in chunks[-2]
    deadline = time.time() + 20
    while s.proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert s.proc.returncode == 0, s.log.read_text()[-1500:]
    s.stop()


def test_a_server_whose_only_model_cannot_load_is_not_ready(tiny_llama_engine, tmp_path):
    """A run config the engine refuses (int8 activations on a float engine): the server stays up to
    say why on /health, and its readiness probes fail, so no traffic is routed to it."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text("engine:\n  int8_activations: true\n")
    s = Server(tiny_llama_engine, "--config", str(cfg), log=tmp_path / "refused.log", until_ready=False)
    try:
        health = httpx.get(f"{s.url}/health", timeout=5)
        assert health.status_code == 503 and health.json()["status"] == "error"
        assert "int8_activations applies to engines with int4 group-wise weights" in health.json()["error"]
        assert httpx.get(f"{s.url}/v2/health/ready", timeout=5).status_code == 400
        assert httpx.get(f"{s.url}/health/ready", timeout=5).status_code == 503
        assert httpx.get(f"{s.url}/v2/health/live", timeout=5).status_code == 200  # up, to say why
    finally:
        s.stop()
    assert "Traceback" not in (tmp_path / "refused.log").read_text()  # a user error is one line, not a stack
