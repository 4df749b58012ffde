"""The TensorRT-LLM contract fake (tests/contract/fake_trtllm) and a `--backend trtllm` engine dir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from trtllm_fake import FAKE_PATH


@pytest.fixture
def fake_trtllm(monkeypatch):
    """Make `import tensorrt_llm` load the fake, for this test only."""
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKE_PATH))
    import tensorrt_llm

    assert Path(tensorrt_llm.__file__).is_relative_to(FAKE_PATH)
    yield tensorrt_llm
    for llm in tensorrt_llm.INSTANCES:
        llm.shutdown()
    tensorrt_llm.INSTANCES.clear()
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        del sys.modules[name]


@pytest.fixture(scope="session")
def trtllm_engine_dir(tmp_path_factory, tiny_llama) -> Path:
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = tmp_path_factory.mktemp("engines") / "tiny-trtllm"
    build_engine(BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8), out, quiet=True)
    return out


@pytest.fixture
def fake_gpu(monkeypatch, fake_trtllm):
    """The fake's trtllm-build on PATH and a pretend H100 (SM 9.0) with TensorRT 10.9 installed."""
    from trtserve.backends.tensorrt_llm import install

    monkeypatch.setenv("PATH", f"{FAKE_PATH / 'bin'}{os.pathsep}{os.environ['PATH']}")
    target = install.Target(
        tensorrt_llm=fake_trtllm.__version__, tensorrt="10.9.0.34", cuda="12.8", gpu_name="NVIDIA H100", sm="9.0"
    )
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: install.Target(**target.to_dict()))
    return target
