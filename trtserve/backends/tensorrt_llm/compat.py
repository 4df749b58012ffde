"""Before loading: does the engine dir fit the installed TensorRT / TensorRT-LLM and the GPU?

A TensorRT plan (`--backend tensorrt`) is bound to the TensorRT version, the GPU's SM and the
TensorRT-LLM plugin library that built it (fact sheet section 7), so all three must match. The
`trtllm` target holds a Hugging Face checkpoint, which any TensorRT-LLM >= 1.0 loads.
"""

from __future__ import annotations

from trtserve.backends.tensorrt_llm.install import INSTALL_COMMAND, Target
from trtserve.engine.errors import UserError

PYTORCH_BACKEND_SINCE = (1, 0)
TRT_ENGINES_UNTIL = (1, 2)  # the last releases that build and run TensorRT engines


def _major_minor(version: str) -> tuple[int, int]:
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:2]]
    return (parts + [0, 0])[0], (parts + [0, 0])[1]


def rebuild_command(manifest) -> str:
    model = (manifest.source or {}).get("path", "MODEL")
    return f"trtserve build {model} -o ENGINE_DIR --backend {manifest.backend} --force"


def check_compatible(manifest, built: Target, installed: Target, engine_dir: str) -> None:
    """Raise UserError naming both values and the rebuild command on the first mismatch."""
    rebuild = f"rebuild it on this host with `{rebuild_command(manifest).replace('ENGINE_DIR', str(engine_dir))}`"
    if installed.tensorrt_llm is None:
        raise UserError(f"{engine_dir} needs TensorRT-LLM, which is not installed; install it with `{INSTALL_COMMAND}`")
    have = installed.tensorrt_llm
    if manifest.backend == "trtllm":
        if _major_minor(have) < PYTORCH_BACKEND_SINCE:
            raise UserError(
                f"{engine_dir} targets TensorRT-LLM's PyTorch backend (>= 1.0) but TensorRT-LLM {have} is installed; "
                f"upgrade it with `{INSTALL_COMMAND} --upgrade`"
            )
        return
    if _major_minor(have) > TRT_ENGINES_UNTIL:
        raise UserError(
            f"{engine_dir} holds TensorRT engines, which TensorRT-LLM {have} no longer runs (the last is 1.2); "
            f"install tensorrt_llm<=1.2 or rebuild it with `trtserve build ... --backend trtllm`"
        )
    pairs = [
        ("TensorRT-LLM", built.tensorrt_llm, installed.tensorrt_llm),
        ("TensorRT", built.tensorrt, installed.tensorrt),
        ("GPU compute capability (SM)", built.sm, installed.sm),
    ]
    for what, was, now in pairs:
        if was != now:
            now_text = now if now is not None else "none (no CUDA GPU visible)" if "SM" in what else "not installed"
            raise UserError(f"{engine_dir} was built for {what} {was} but this host has {now_text}; {rebuild}")
