"""Can this TensorRT-LLM build or run a workflow, and does an engine dir fit it?

Which TensorRT-LLM has the TensorRT backend is read from what it has (capabilities.py: the
`_tensorrt_engine` module, the `trtllm-build` command), never from its version number alone:
1.3.0rc0-rc15 still have it, main after PR #15918 does not.

A TensorRT plan (`--backend tensorrt`) is also bound to the TensorRT version, the GPU's SM and the
TensorRT-LLM plugin library that built it (fact sheet section 7), so all three must match. The
`trtllm` target holds a Hugging Face checkpoint, which every TensorRT-LLM >= 1.0 loads.
"""

from __future__ import annotations

from pathlib import Path

from trtserve.backends.tensorrt_llm.capabilities import Capabilities
from trtserve.backends.tensorrt_llm.install import INSTALL_COMMAND, Target
from trtserve.backends.tensorrt_llm.model_support import engine_dir_problem
from trtserve.engine.errors import UserError


def workflow_problem(caps: Capabilities, backend: str, *, build: bool) -> str | None:
    """Why `caps` cannot build (build=True) or run `backend` ("tensorrt" | "trtllm"); None if it can."""
    if backend != "tensorrt":
        return None  # the PyTorch backend's LLM is in every release >= 1.0 (release_line refuses older)
    if not caps.tensorrt_engine:
        return (
            f"{caps.label} has no TensorRT backend (no tensorrt_llm._tensorrt_engine: upstream removed it in "
            "PR #15918); use a release that has it (1.0-1.2, or 1.3.0rc15 and earlier) or --backend trtllm"
        )
    if build and not caps.trtllm_build:
        return f"{caps.label} has no trtllm-build (tensorrt_llm.commands.build is missing); reinstall it"
    return None


def check_workflow(caps: Capabilities, backend: str, *, build: bool) -> None:
    """UserError with the reason when `caps` cannot build / run `backend`."""
    problem = workflow_problem(caps, backend, build=build)
    if problem is not None:
        raise UserError(problem)


def rebuild_command(manifest) -> str:
    model = (manifest.source or {}).get("path", "MODEL")
    return f"trtserve build {model} -o ENGINE_DIR --backend {manifest.backend} --force"


def check_compatible(manifest, built: Target, installed: Target, caps: Capabilities | None, engine_dir: str) -> None:
    """Raise UserError naming both values and the rebuild command on the first mismatch.

    caps: the installed TensorRT-LLM's capabilities (None: it is not installed).
    """
    rebuild = f"rebuild it on this host with `{rebuild_command(manifest).replace('ENGINE_DIR', str(engine_dir))}`"
    if caps is None or installed.tensorrt_llm is None:
        raise UserError(f"{engine_dir} needs TensorRT-LLM, which is not installed; install it with `{INSTALL_COMMAND}`")
    problem = workflow_problem(caps, manifest.backend, build=False)
    if problem is not None:
        raise UserError(f"{engine_dir} holds TensorRT engines, but {problem}")
    problem = engine_dir_problem(caps, manifest.backend, Path(engine_dir))  # model_support.MODELS
    if problem is not None:
        raise UserError(f"{engine_dir} cannot be served here: {problem}")
    if manifest.backend == "trtllm":
        return
    pairs = [
        ("TensorRT-LLM", built.tensorrt_llm, installed.tensorrt_llm),
        ("TensorRT", built.tensorrt, installed.tensorrt),
        ("GPU compute capability (SM)", built.sm, installed.sm),
    ]
    for what, was, now in pairs:
        if was != now:
            now_text = now if now is not None else "none (no CUDA GPU visible)" if "SM" in what else "not installed"
            raise UserError(f"{engine_dir} was built for {what} {was} but this host has {now_text}; {rebuild}")
