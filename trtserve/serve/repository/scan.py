"""What `trtserve run PATH` serves: an engine dir (a repository of one model, version 1) or a
repository `PATH/<model>/<version>/` of engine dirs (versions are positive integers, as in Triton).

Tensor models sit beside them: a Triton model dir (`<model>/config.pbtxt`, labels beside it, and
`<version>/model.onnx|model.py`, an ensemble's version dir empty) or a tensor engine dir from
`trtserve build model.onnx` (its config.pbtxt inside the version dir, with the manifest)."""

from __future__ import annotations

from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.manifest import MANIFEST, verify_engine_dir
from trtserve.engine.open import preflight
from trtserve.serve.repository.kinds import detect
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.policy import Policy, read_policy
from trtserve.serve.repository.router import ascii_int
from trtserve.serve.repository.version import ModelVersion
from trtserve.tensor.config import CONFIG_FILE


def is_engine_dir(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def preflight_dir(path: Path) -> None:
    """`trtserve run ENGINE_DIR`'s check before serving: an LLM engine dir's backend preflight; a
    tensor engine dir's files against its manifest (its config and model are checked as it opens)."""
    if is_engine_dir(path) and (path / CONFIG_FILE).is_file():
        verify_engine_dir(path)
    else:
        preflight(path)


def scan(path: Path, model_name: str | None = None) -> dict[str, RepoModel]:
    """The models under `path`; an engine dir is one model named `model_name` or after the dir."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} does not exist or is not a directory; give an engine dir or a model repository")
    if is_engine_dir(path):
        name = model_name or path.resolve().name
        kind, config = detect(path, path)  # the engine dir is its own model dir
        return {name: RepoModel(name, None, {1: ModelVersion(name, 1, path, kind=kind, config_dir=config)}, Policy())}
    models = {}
    for model_dir in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        versions = scan_versions(model_dir)
        if versions:
            models[model_dir.name] = RepoModel(model_dir.name, model_dir, versions, read_policy(model_dir))
    if not models:
        raise UserError(
            f"{path} is neither an engine dir (no {MANIFEST}) nor a model repository (no <model>/<version>/ "
            "dirs); build one with `trtserve build MODEL -o REPO/<model>/1`"
        )
    return models


def scan_versions(model_dir: Path) -> dict[int, ModelVersion]:
    """Version dirs are named by positive integers; anything else (policy.yaml, notes) is skipped."""
    versions = {}
    for p in model_dir.iterdir():
        if p.is_dir() and (ascii_int(p.name) or 0) > 0:
            kind, config = detect(model_dir, p)
            versions[int(p.name)] = ModelVersion(model_dir.name, int(p.name), p, kind=kind, config_dir=config)
    return versions


def config_dir(model_dir: Path, version_dir: Path) -> Path | None:
    """The tensor kind's detector (serve/repository/kinds.py): where a version's config.pbtxt lives,
    the Triton model dir or a tensor engine dir itself; None when it is not a tensor model."""
    if (model_dir / CONFIG_FILE).is_file():
        return model_dir
    if (version_dir / CONFIG_FILE).is_file() and is_engine_dir(version_dir):
        return version_dir
    return None
