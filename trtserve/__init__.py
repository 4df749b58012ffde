"""trtserve: compile-then-serve for TensorRT-LLM, with an embedded PyTorch engine."""

import time as _time

# First, before any other import: when this interpreter first imported trtserve, as time.time(). The
# start-up clock's zero (serve/telemetry/startup.py): a `trtserve` command imports it first thing.
STARTED_AT = _time.time()

import os as _os  # noqa: E402 (after the mark)

if _os.environ.get("TRTSERVE_ISA"):  # the kernel ISA cap reaches torch only before its first CPU op
    from trtserve.kernels import native as _native

    _native.export_torch_env()

__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str):
    # Lazy: `import trtserve` stays cheap for the CLI; torch loads only when the engine is used.
    if name == "__version__":  # written once, in the contract (engine/version.py)
        from trtserve.engine.version import VERSION

        return VERSION
    if name == "LLM":
        from trtserve.llm import LLM

        return LLM
    if name == "SamplingParams":
        from trtserve.engine.sampling import SamplingParams

        return SamplingParams
    raise AttributeError(name)
