import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import make_hf_model  # noqa: E402


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
