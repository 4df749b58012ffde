"""A live `trtserve run` on 127.0.0.1 serving the tiny engine, started as a real process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


class Server:
    def __init__(
        self,
        engine: Path,
        *args: str,
        env: dict | None = None,
        log: Path,
        until_ready: bool = True,
        launcher: tuple[str, ...] = ("-m", "trtserve.cli"),
    ):
        """until_ready False: until the start-up loads have ended, ready or not (/health no longer "loading").
        launcher: what python runs in place of trtserve's CLI, e.g. the fault injector's (tests/faults/)."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_file = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, *launcher, "run", str(engine), "--port", str(self.port), *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
            try:
                if until_ready and httpx.get(f"{self.url}/v2/health/ready", timeout=1).status_code == 200:
                    return
                if not until_ready and httpx.get(f"{self.url}/health", timeout=1).json().get("status") != "loading":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not ready: {log.read_text()[-2000:]}")

    def metric(self, name: str, headers: dict | None = None) -> float:
        text = httpx.get(f"{self.url}/metrics", headers=headers or {}).text
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def wait_idle(self, headers: dict | None = None, timeout: float = 10) -> None:
        """Until no sequence runs or waits and no KV block is used."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if (
                self.metric("trtserve_num_requests_running", headers) == 0
                and self.metric("trtserve_num_requests_waiting", headers) == 0
                and self.metric("trtserve_kv_cache_usage_ratio", headers) == 0
            ):
                return
            time.sleep(0.05)
        raise AssertionError("the engine did not go idle")

    def stop(self, sig=signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(tiny_llama_engine, tmp_path_factory):
    s = Server(tiny_llama_engine, "--kv-cache-memory", "64MiB", log=tmp_path_factory.mktemp("logs") / "server.log")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def model_name(tiny_llama_engine) -> str:
    return tiny_llama_engine.name


@pytest.fixture(scope="session")
def offline(tiny_llama_engine):
    from trtserve import LLM

    return LLM(tiny_llama_engine, kv_cache_memory=16 << 20)
