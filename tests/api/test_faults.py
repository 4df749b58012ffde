"""Faults injected into a live server's engine loop (the `faults` fixture, tests/faults/):
a failing step, a slow step, an exhausted KV cache, a dead engine thread."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import Server
from faults.plugin import Faults

SETTINGS = "stall_timeout: 1.0\ndead_exit_after: 1.0\nstate_dir: none\n"


def complete(url: str, model: str, prompt: str = "The quick brown fox", **extra) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True} | extra
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def _start(engine: Path, tmp: Path, faults: Faults) -> Server:
    settings = tmp / f"{faults.path.stem}.yaml"
    settings.write_text(SETTINGS)
    args = ("--kv-cache-memory", "8MiB", "--config", str(settings))
    return Server(engine, *args, launcher=faults.launcher, log=tmp / f"{faults.path.stem}.log")


@pytest.fixture(scope="module")
def faulty(tiny_llama_engine, tmp_path_factory, faults):
    fault = faults("faulty")
    server = _start(tiny_llama_engine, tmp_path_factory.mktemp("faulty"), fault)
    yield server, fault
    server.stop()


@pytest.mark.timeout(300)  # setup builds an engine and starts a server: slow on a loaded machine
def test_failing_step_fails_its_requests_and_the_engine_goes_on(faulty, model_name):
    server, fault = faulty
    reference = complete(server.url, model_name).json()["choices"][0]["text"]
    fault.arm("raise")
    failed = complete(server.url, model_name)
    assert failed.status_code == 500
    assert "injected fault: this engine step raised" in failed.json()["error"]["message"]
    assert not fault.pending  # consumed: a fault fires once
    server.wait_idle()
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert httpx.get(f"{server.url}/v2/health/ready").status_code == 200
    assert complete(server.url, model_name).json()["choices"][0]["text"] == reference


@pytest.mark.timeout(300)  # setup builds an engine and starts a server: slow on a loaded machine
def test_slow_step_gives_504_and_readiness_false_while_stalled(faulty, model_name):
    server, fault = faulty
    fault.arm("slow", seconds=4)
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(httpx.get(f"{server.url}/v2/health/ready").status_code)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    with ThreadPoolExecutor(2) as pool:
        patient = pool.submit(complete, server.url, model_name)
        hurried = pool.submit(complete, server.url, model_name, "A model server", timeout=1.0)
        assert hurried.result().status_code == 504
        assert "deadline" in hurried.result().json()["error"]["message"]
        assert patient.result().status_code == 200  # the step was slow, not lost
    stop.set()
    watcher.join()
    assert 400 in seen  # the engine made no progress for > stall_timeout with a request waiting
    server.wait_idle()
    assert httpx.get(f"{server.url}/v2/health/ready").status_code == 200  # and readiness came back


@pytest.mark.timeout(300)  # setup builds an engine and starts a server: slow on a loaded machine
def test_kv_exhaustion_queues_and_loses_nothing(faulty, model_name):
    server, fault = faulty
    prompts = ["The quick brown fox", "Paged attention keeps", "Continuous batching lets", "A model server"]
    reference = [complete(server.url, model_name, p, max_tokens=40).json()["choices"][0]["text"] for p in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(complete, server.url, model_name, p, max_tokens=40) for p in prompts]
        fault.arm("kv_exhaust", seconds=1.5)  # taken mid-flight: running requests get preempted
        answers = [f.result() for f in futures]
    assert [a.status_code for a in answers] == [200] * len(prompts)
    assert [a.json()["choices"][0]["text"] for a in answers] == reference
    server.wait_idle()


@pytest.mark.timeout(300)  # setup builds an engine and starts a server: slow on a loaded machine
def test_dead_engine_fails_in_flight_with_503_then_exits_3(tiny_llama_engine, tmp_path, model_name, faults):
    fault = faults("dying")
    server = _start(tiny_llama_engine, tmp_path, fault)
    try:
        with ThreadPoolExecutor(1) as pool:
            long = pool.submit(complete, server.url, model_name, max_tokens=200)
            deadline = time.monotonic() + 30
            while server.metric("trtserve_num_requests_running") == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            fault.arm("kill")
            answer = long.result()
        assert answer.status_code == 503, answer.text
        assert "engine loop died" in answer.json()["error"]["message"]
        if server.proc.poll() is None:  # before the exit: not alive, not ready, new requests 503
            try:
                assert httpx.get(f"{server.url}/health").status_code == 503
                assert httpx.get(f"{server.url}/v2/health/ready").status_code == 400
                assert complete(server.url, model_name).status_code == 503
            except httpx.ConnectError:
                pass  # it has exited meanwhile, as it should
        assert server.proc.wait(60) == 3
        assert "is dead; exiting with status 3" in server.log.read_text()
    finally:
        server.stop()
