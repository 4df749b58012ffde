"""Third-party clients (instructor, LangChain, the KServe SDK, openai's helpers, the anthropic SDK) against a live
`trtserve run` with HTTP and gRPC, used the way each client's documentation shows."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest

# tests/api/conftest.py's Server, loaded under its own name: two conftest modules cannot both be
# imported as `conftest`; whichever pytest imported last answers tests/api's `from conftest import
# Server`, so it is re-exported here and test modules here import nothing from conftest.
_spec = importlib.util.spec_from_file_location(
    "trtserve_tests_api_conftest", Path(__file__).parents[1] / "api" / "conftest.py"
)
_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_api)
Server = _api.Server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server_class():
    """tests/api's Server, for a test module that starts a server of its own (one with an API key, say)."""
    return Server


@pytest.fixture(scope="session")
def server(tiny_llama_engine, tmp_path_factory):
    """The tiny random engine over HTTP and gRPC (`grpc`: host:port for gRPC clients)."""
    port = _free_port()
    s = Server(
        tiny_llama_engine,
        "--kv-cache-memory",
        "64MiB",
        "--grpc-port",
        str(port),
        log=tmp_path_factory.mktemp("logs") / "clients.log",
    )
    s.grpc = f"127.0.0.1:{port}"
    yield s
    s.stop()


@pytest.fixture(scope="session")
def model_name(tiny_llama_engine) -> str:
    return tiny_llama_engine.name
