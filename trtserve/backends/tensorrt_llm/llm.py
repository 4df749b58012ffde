"""Opening an engine dir with TensorRT-LLM's LLM API: preflight checks, then the LLM object.

API facts (release each comes from):
  `tensorrt_llm.LLM(model, tokenizer=..., **llm_args)`      1.0 docs: the PyTorch backend's LLM
  `tensorrt_llm._tensorrt_engine.LLM(...)`                  1.x: the TensorRT-engine LLM (1.0 release notes)
  `tensorrt_llm.LLM(...)` on an engine dir                  0.17-0.19: the TRT path was the default
  `tensorrt_llm.llmapi.KvCacheConfig`, `CudaGraphConfig`    1.0 docs (examples/llm_runtime.py)
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import yaml

from trtserve.backends.tensorrt_llm import BACKENDS, install
from trtserve.backends.tensorrt_llm.compat import check_compatible
from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.layout import HF_DIR, OPTIONS_FILE, TRT_ENGINE_DIR
from trtserve.engine.manifest import Manifest, read_manifest


def preflight(engine_dir: Path, manifest: Manifest | None = None) -> ModuleType:
    """Import tensorrt_llm and check the engine dir fits this host; UserError (exit 2) if not."""
    manifest = manifest or read_manifest(engine_dir)
    if manifest.backend not in BACKENDS:
        raise UserError(f"{engine_dir} was built for the {manifest.backend} backend, not TensorRT-LLM")
    tllm = install.import_tensorrt_llm()
    built = install.Target(**(manifest.target or {}))
    check_compatible(manifest, built, install.installed_target(tllm), str(engine_dir))
    return tllm


def read_options(engine_dir: Path) -> dict:
    path = engine_dir / OPTIONS_FILE
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise EngineIntegrityError(f"{path} is unreadable ({type(err).__name__}); rebuild the engine") from None
    if not isinstance(data, dict):
        raise EngineIntegrityError(f"{path} does not hold a mapping; rebuild the engine")
    return data


def llm_kwargs(tllm: ModuleType, options: dict) -> dict:
    """The options YAML as LLM(...) keyword arguments, nested configs as their llmapi classes."""
    import importlib

    llmapi = importlib.import_module(tllm.__name__ + ".llmapi")
    kw = dict(options)
    if "kv_cache_config" in kw:
        kw["kv_cache_config"] = llmapi.KvCacheConfig(**kw["kv_cache_config"])
    if "cuda_graph_config" in kw:
        kw["cuda_graph_config"] = llmapi.CudaGraphConfig(**kw["cuda_graph_config"])
    return kw


def create_llm(tllm: ModuleType, backend: str, engine_dir: Path, options: dict, tokenizer_dir: Path, tp_size: int):
    """tp_size: the build's tensor-parallel ranks (TensorRT engines are built per rank; the HF
    checkpoint is sharded at load), passed as LLM's `tensor_parallel_size` (1.0 docs)."""
    kw = {**llm_kwargs(tllm, options), "tensor_parallel_size": tp_size}
    if backend == "trtllm":
        return tllm.LLM(model=str(engine_dir / HF_DIR), tokenizer=str(tokenizer_dir), **kw)
    try:
        from tensorrt_llm._tensorrt_engine import LLM  # 1.x: TensorRT engines have their own LLM class
    except ImportError:
        LLM = tllm.LLM  # 0.x: the LLM class runs TensorRT engines
    return LLM(model=str(engine_dir / TRT_ENGINE_DIR), tokenizer=str(tokenizer_dir), **kw)
