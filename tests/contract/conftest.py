"""The per-release TensorRT-LLM fakes (tests/contract/fake_trtllm) and a `--backend trtllm` engine dir.

`fake_trtllm` is parametrized over RELEASES, so every test that uses it runs against the fakes of
1.0, 1.1, 1.2 and main; a test parametrizes `release` itself to narrow that (e.g. TENSORRT_RELEASES).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import make_lora_adapter
from trtllm_fake import RELEASES, release_paths, release_root


def _forget_tensorrt_llm() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("tensorrt_llm", "trtllm_fake_core")]:
        del sys.modules[name]


@pytest.fixture(params=RELEASES)
def release(request) -> str:
    return request.param


def switch_release(monkeypatch, release: str):
    """Make `import tensorrt_llm` load the fake of `release` (replacing any fake loaded before)."""
    _forget_tensorrt_llm()
    for path in reversed(release_paths(release)):
        monkeypatch.syspath_prepend(path)
    import tensorrt_llm

    assert Path(tensorrt_llm.__file__).is_relative_to(release_root(release))
    return tensorrt_llm


@pytest.fixture
def fake_trtllm(monkeypatch, release):
    """Make `import tensorrt_llm` load the fake of `release`, for this test only."""
    tensorrt_llm = switch_release(monkeypatch, release)
    yield tensorrt_llm
    current = sys.modules.get("trtllm_fake_core.executor")  # another release's, if the test switched
    for instances in {id(x): x for x in (tensorrt_llm.INSTANCES, getattr(current, "INSTANCES", []))}.values():
        for llm in instances:
            llm.shutdown()
        instances.clear()
    _forget_tensorrt_llm()


@pytest.fixture(scope="session")
def trtllm_engine_dir(tmp_path_factory, tiny_llama) -> Path:
    """Built without TensorRT-LLM, so its options YAML is planned for the default release line."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = tmp_path_factory.mktemp("engines") / "tiny-trtllm"
    build_engine(BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8), out, quiet=True)
    return out


@pytest.fixture
def engine(fake_trtllm, trtllm_engine_dir, monkeypatch):
    """A TrtllmEngine over `trtllm_engine_dir` on the release's fake, polling stats every 0.1 s while idle
    (the wait for an iteration stays the adapter's own: the stats tests pin it against the fakes' bursts)."""
    from trtserve.backends.tensorrt_llm import engine as engine_module
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine
    from trtserve.engine.run_config import RuntimeConfig

    monkeypatch.setattr(engine_module, "STATS_POLL_S", 0.1)
    e = TrtllmEngine(trtllm_engine_dir, RuntimeConfig(kv_cache_memory=1 << 20))
    yield e
    e.shutdown()


@pytest.fixture
def fake_gpu(monkeypatch, fake_trtllm, release):
    """The release's trtllm-build (if it has one) on PATH and a pretend H100 (SM 9.0) with TensorRT 10.9."""
    from trtserve.backends.tensorrt_llm import install

    bin_dir = release_root(release) / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TRTLLM_SM", "9.0")  # the fake trtllm-build's get_sm_version()
    target = install.Target(
        tensorrt_llm=fake_trtllm.__version__, tensorrt="10.9.0.34", cuda="12.8", gpu_name="NVIDIA H100", sm="9.0"
    )
    monkeypatch.setattr(install, "installed_target", lambda tllm=None: install.Target(**target.to_dict()))
    return target


@pytest.fixture(scope="session")
def adapters(tmp_path_factory, tiny_llama):
    """PEFT adapters of the tiny Llama: name -> dir."""
    d = tmp_path_factory.mktemp("adapters")
    specs = {
        "sql": (("q_proj", "v_proj"), 4),
        "chat": (("q_proj", "k_proj", "v_proj", "o_proj"), 8),
        "sql2": (("q_proj", "v_proj"), 4),  # sql's modules and rank, other weights
        "mlp": (("gate_proj", "up_proj", "down_proj"), 4),
        "wide": (("q_proj",), 16),
    }
    return {
        name: make_lora_adapter(tiny_llama, d / name, targets, r, 2.0 * r, seed=i)
        for i, (name, (targets, r)) in enumerate(specs.items())
    }


@pytest.fixture(scope="session")
def trtllm_lora_dir(tmp_path_factory, tiny_llama, adapters):
    """A `--backend trtllm` engine dir packing adapters sql and chat."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = tmp_path_factory.mktemp("engines") / "tiny-trtllm-lora"
    lora = {"sql": adapters["sql"], "chat": adapters["chat"]}
    build_engine(BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8, lora=lora), out, quiet=True)
    return out
