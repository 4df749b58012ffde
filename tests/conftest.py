import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import make_hf_model  # noqa: E402

pytest_plugins = ["faults.plugin"]  # the `faults` fixture (tests/faults/)


@pytest.fixture(scope="session", autouse=True)
def _state_dirs_in_tmp(tmp_path_factory):
    """Servers started without --state-dir keep their durable state under $XDG_DATA_HOME
    (trtserve/state/paths.py): point it at this session's tmp dir, never the user's home."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """A random GQA Llama with untied embeddings."""
    return make_hf_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_llama_engine(tmp_path_factory, tiny_llama) -> Path:
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = tmp_path_factory.mktemp("engines") / "tiny-llama"
    build_engine(BuildConfig(model=str(tiny_llama), tokens_per_block=16), out, quiet=True)
    return out
