"""trtserve: compile-then-serve for TensorRT-LLM, with an embedded PyTorch engine."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trtserve")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+src"

__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str):
    # Lazy: `import trtserve` stays cheap for the CLI; torch loads only when the engine is used.
    if name == "LLM":
        from trtserve.llm import LLM

        return LLM
    if name == "SamplingParams":
        from trtserve.engine.sampling import SamplingParams

        return SamplingParams
    raise AttributeError(name)
