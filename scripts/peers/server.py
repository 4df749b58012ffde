"""A server subprocess for the HTTP peers: start it on a free port, wait until ready, stop it cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(
    cmd: list[str], ready_url: str, log: Path, env: dict[str, str] | None = None, timeout: float = 600.0
) -> Iterator[subprocess.Popen]:
    """Run `cmd` (output to `log`) until `ready_url` answers 200; SIGINT it on exit, SIGKILL if it hangs."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    why = last_error(log)
                    raise RuntimeError(
                        f"{Path(cmd[0]).name} exited with {proc.returncode} before ready{why}; see {log}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{Path(cmd[0]).name} not ready after {timeout:.0f}s; see {log}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(ready_url, timeout=2).status_code == 200:
                        break
                time.sleep(0.5)
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def last_error(log: Path, start: int = 0) -> str:
    """': <the first and the last line of `log` past byte `start` that say error or failed>' (llama.cpp's first
    `error loading model: ...` is the cause, a Python traceback's last line its exception), or '': why a peer
    could not take the model, for the report."""
    if not log.exists():
        return ""
    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    found = [line.strip() for line in lines if "error" in line.lower() or "failed" in line.lower()]
    if not found:
        return ""
    return f": {found[0][:300]}" + (f" ... {found[-1][:300]}" if len(found) > 1 else "")


def warm_up(base_url: str, model: str) -> None:
    """One short request, not measured: first-call costs (allocation, kernel selection) stay out of the runs."""
    from trtserve.bench.workload import random_requests

    drive(
        base_url,
        model,
        random_requests(1, 16, 4, 1000, seed=12345),
        max_concurrency=1,
        request_rate=float("inf"),
        seed=0,
        progress=False,
    )


def drive(
    base_url: str,
    model: str,
    requests,
    *,
    max_concurrency: int | None,
    request_rate: float,
    seed: int,
    progress: bool = True,
):
    """One `trtserve.bench` run (openai /v1/completions, token-id prompts, ignore_eos) against base_url."""
    import asyncio

    from trtserve.bench.client import run_benchmark

    return asyncio.run(
        run_benchmark(
            base_url,
            "openai",
            model,
            requests,
            request_rate=request_rate,
            max_concurrency=max_concurrency,
            seed=seed,
            progress=progress,
            ignore_eos=True,
            timeout=3600.0,
        )
    )
