"""Opening an engine dir with TensorRT-LLM's LLM API: preflight checks, then the LLM object.

API facts (release each comes from; capabilities.py says which the installed one has):
  `tensorrt_llm.LLM(model, tokenizer=..., **llm_args)`      1.0-main: the PyTorch backend's LLM
  `tensorrt_llm._tensorrt_engine.LLM(...)`                  1.0-1.2: the TensorRT-engine LLM (gone on main)
  `tensorrt_llm.llmapi.KvCacheConfig`, `CudaGraphConfig`    1.0-main (examples/llm_runtime.py)
  `LoraConfig` (llmapi on main; lora_manager in 1.0-1.2)    capabilities.lora_classes
  `tensorrt_llm.llmapi.NGramDecodingConfig`, ...            1.0-main (speculative.py)
LLM args are pydantic models with extra="forbid" (llmapi/llm_args.py), so the kwargs are fitted to
the installed release first (serve_plan.fit_options).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import yaml

from trtserve.backends.tensorrt_llm import BACKENDS, install
from trtserve.backends.tensorrt_llm.capabilities import Capabilities, lora_classes, probe
from trtserve.backends.tensorrt_llm.compat import check_compatible
from trtserve.backends.tensorrt_llm.serve_plan import fit_options
from trtserve.backends.tensorrt_llm.speculative import SPEC_OPTION, decoding_config
from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.layout import HF_DIR, OPTIONS_FILE, TRT_ENGINE_DIR
from trtserve.engine.manifest import Manifest, read_manifest


def open_tensorrt_llm(engine_dir: Path, manifest: Manifest | None = None) -> tuple[ModuleType, Capabilities]:
    """Import tensorrt_llm, introspect it, and check the engine dir fits this host; UserError if not."""
    manifest = manifest or read_manifest(engine_dir)
    if manifest.backend not in BACKENDS:
        raise UserError(f"{engine_dir} was built for the {manifest.backend} backend, not TensorRT-LLM")
    tllm = install.import_tensorrt_llm()
    caps = probe(tllm)
    built = install.Target(**(manifest.target or {}))
    check_compatible(manifest, built, install.installed_target(tllm), caps, str(engine_dir))
    return tllm, caps


def preflight(engine_dir: Path, manifest: Manifest | None = None) -> ModuleType:
    """The backend spec's pre-serve check (engine/backends.py): UserError (exit 2) if the dir cannot run here."""
    return open_tensorrt_llm(engine_dir, manifest)[0]


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
    """The options as LLM(...) keyword arguments, nested configs as their llmapi classes."""
    import importlib

    llmapi = importlib.import_module(tllm.__name__ + ".llmapi")
    kw = dict(options)
    if "kv_cache_config" in kw:
        kw["kv_cache_config"] = llmapi.KvCacheConfig(**kw["kv_cache_config"])
    if "cuda_graph_config" in kw:
        kw["cuda_graph_config"] = llmapi.CudaGraphConfig(**kw["cuda_graph_config"])
    if "lora_config" in kw:
        lora_config = lora_classes(tllm)[0]
        if lora_config is None:
            raise UserError(f"TensorRT-LLM {getattr(tllm, '__version__', '')} has no LoraConfig; serve without `lora`")
        kw["lora_config"] = lora_config(**kw["lora_config"])
    if SPEC_OPTION in kw:
        kw[SPEC_OPTION] = decoding_config(tllm, kw[SPEC_OPTION])
    return kw


def create_llm(
    tllm: ModuleType, caps: Capabilities, backend: str, engine_dir: Path, options: dict, tokenizer_dir: Path, tp: int
):
    """tp: the build's tensor-parallel ranks (TensorRT engines are built per rank; the HF checkpoint
    is sharded at load), passed as LLM's `tensor_parallel_size`."""
    fitted = fit_options(options, backend, caps, str(engine_dir / OPTIONS_FILE))
    kw = {**llm_kwargs(tllm, fitted), "tensor_parallel_size": tp}
    if backend == "trtllm":
        return tllm.LLM(model=str(engine_dir / HF_DIR), tokenizer=str(tokenizer_dir), **kw)
    import importlib

    trt = importlib.import_module(tllm.__name__ + "._tensorrt_engine")  # present: check_compatible saw to it
    return trt.LLM(model=str(engine_dir / TRT_ENGINE_DIR), tokenizer=str(tokenizer_dir), **kw)
