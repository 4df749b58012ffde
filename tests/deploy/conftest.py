"""A local Ray (2 CPUs) with Serve's HTTP proxy on 127.0.0.1, shared by this directory's tests.
Skips the tests (not fails) where Ray is not installed or cannot start here."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def batch4_engine(tmp_path_factory, tiny_llama) -> Path:
    """The tiny Llama built with max_batch_size=4, so replica limits derived from it are small."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = tmp_path_factory.mktemp("engines") / "tiny-b4"
    build_engine(BuildConfig(model=str(tiny_llama), tokens_per_block=16, max_batch_size=4), out, quiet=True)
    return out


@pytest.fixture(scope="module")
def ray_serve(tmp_path_factory):
    """(proxy url) of a fresh local Ray + Serve; shut down after the module."""
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    except Exception as err:  # no shared memory, no ports, a sandbox that forbids Ray's processes
        ray.shutdown()
        pytest.skip(f"Ray cannot start here: {type(err).__name__}: {err}")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
