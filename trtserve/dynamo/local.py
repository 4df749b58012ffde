"""A Dynamo deployment on one machine, on loopback, without etcd or NATS: the frontend and trtserve workers
as child processes (scripts/bench_dynamo.py and tests/dynamo/ start theirs with it).

Discovery is a shared directory (`--discovery-backend file`, DYN_FILE_KV), requests go over TCP and
events over ZMQ, every listener on 127.0.0.1. Each process is stopped by its own pid.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A free loopback port below 32768 (Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit number)."""
    for _ in range(200):
        port = random.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32768 on 127.0.0.1")


def loopback_env(discovery_dir: Path, threads: int | None = None) -> dict[str, str]:
    """The environment that keeps Dynamo on loopback with file discovery in `discovery_dir`."""
    env = {
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_EVENT_PLANE_HOST": "127.0.0.1",
        "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
        "DYN_SYSTEM_HOST": "127.0.0.1",
        "DYN_SELF_HOST_METADATA": "0",
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(discovery_dir),
        "HF_HUB_OFFLINE": "1",
        "UCX_TLS": "self,sm,tcp",
        "UCX_NET_DEVICES": "lo",
    }
    if threads is not None:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    return env


class LocalProcess:
    """One child process (frontend or worker), its log, and a port to probe it on."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, port: int):
        self.port, self.log = port, log
        self._log_file = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=self._log_file, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except OSError as err:
            return getattr(err, "code", 0) or 0, ""

    def wait(self, path: str, ready, timeout: float = 90.0) -> None:
        """Until GET path answers 200 with a body `ready(body)` accepts; RuntimeError if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log.name} exited: {self.log.read_text()[-3000:]}")
            status, body = self.get(path)
            if status == 200 and ready(body):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.log.name} not ready in {timeout:.0f} s: {self.log.read_text()[-3000:]}")

    def metric(self, name: str) -> float:
        """A trtserve_dynamo_* value from the worker's /metrics (the system port)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        self._log_file.close()


def start_frontend(env: dict[str, str], log: Path, router_mode: str = "kv") -> LocalProcess:
    port = free_port()
    argv = [sys.executable, "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(port)]
    argv += ["--router-mode", router_mode, "--discovery-backend", "file"]
    return LocalProcess(argv, env, log, port)


def start_worker(engine_dir: Path, role: str, name: str, env: dict[str, str], log: Path, *args: str) -> LocalProcess:
    """`trtserve dynamo`; its system port (DYN_SYSTEM_PORT) serves /health and /metrics."""
    port = free_port()
    argv = [sys.executable, "-m", "trtserve.cli", "dynamo", str(engine_dir), "--role", role]
    argv += ["--served-model-name", name, *args]
    return LocalProcess(argv, {**env, "DYN_SYSTEM_PORT": str(port), "DYN_SYSTEM_ENABLED": "true"}, log, port)


def wait_model(frontend: LocalProcess, name: str, timeout: float = 90.0) -> None:
    frontend.wait("/v1/models", lambda body: name in [m["id"] for m in json.loads(body).get("data", [])], timeout)


def wait_worker(worker: LocalProcess, timeout: float = 90.0) -> None:
    """Until the worker's /metrics carries our counters (its engine has started and registered)."""
    worker.wait("/metrics", lambda body: "trtserve_dynamo_prompt_tokens" in body, timeout)
