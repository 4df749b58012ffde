"""Tensor models in the repository: which versions a model loads (its config.pbtxt's version_policy
unless policy.yaml names one), the order models open in (ensembles after the models they compose),
opening one version, and the resolver that hands an ensemble the READY model of each step."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trtserve.engine.errors import UserError
from trtserve.engine.manifest import verify_engine_dir
from trtserve.serve.errors import APIError
from trtserve.serve.repository.kinds import Repo, Tensors
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.router import Target
from trtserve.serve.repository.scan import is_engine_dir
from trtserve.serve.repository.version import ModelVersion
from trtserve.tensor.config import read_config, select_versions
from trtserve.tensor.kinds import open_model
from trtserve.tensor.types import ModelNotReady, Resolver, TensorError, TensorModel, TensorModelConfig

if TYPE_CHECKING:
    from trtserve.engine.run_config import RuntimeConfig


class ModelNotFound(TensorError):
    """An ensemble step names a model the repository does not have."""

    status, code = 404, "NOT_FOUND"


def has_config_tensors(m: RepoModel) -> bool:
    """Every version is of a kind served by its config's tensors (what an ensemble step can name)."""
    return bool(m.versions) and all(mv.kind.tensors is Tensors.CONFIG for mv in m.versions.values())


def model_config(m: RepoModel) -> TensorModelConfig | None:
    """The config.pbtxt of a Triton model dir (UserError when it is bad); None when each version
    carries its own (tensor engine dirs) or the model is an LLM."""
    if m.dir is None or not has_config_tensors(m) or not (m.dir / "config.pbtxt").is_file():
        return None
    return read_config(m.dir, m.name)


def wanted_versions(m: RepoModel) -> list[int]:
    """The versions to load: policy.yaml's version_policy when it names one, else config.pbtxt's
    (UserError for a bad config.pbtxt)."""
    config = None if "version_policy" in m.policy.model_fields_set else model_config(m)
    if config is None:
        return m.policy.version_policy.select(list(m.versions))
    return select_versions(config, list(m.versions))


def is_ensemble(m: RepoModel) -> bool:
    """Ensembles load after every other model (their steps must be READY first)."""
    try:
        config = model_config(m)
    except UserError:
        return False
    return config is not None and config.kind == "ensemble"


def resolve(models: dict[str, RepoModel], name: str, version: int) -> TensorModel:
    """The READY tensor model answering (name, version or -1: the routing choice)."""
    m = models.get(name)
    if m is None or not has_config_tensors(m):
        what = "is not in the repository" if m is None else "is an LLM, not a tensor model"
        raise ModelNotFound(f"model {name!r} {what}; an ensemble step names a tensor model of this repository")
    try:
        mv, _ = m.route(Target(name, None if version == -1 else version), None)
    except APIError as err:
        raise ModelNotReady(err.message) from None
    if mv.tensor is None:
        raise ModelNotReady(f"model {mv.name} is {mv.state.value}; retry later")
    return mv.tensor


def open_tensor(repo: Repo, mv: ModelVersion, run: RuntimeConfig) -> TensorModel:
    """The tensor kind's opener (serve/repository/kinds.py): no KV cache, steps resolved by the repository."""
    return open_version(mv, repo.resolve)


def open_version(mv: ModelVersion, resolver: Resolver) -> TensorModel:
    """Open one version (blocking: runs in a worker thread). A tensor engine dir is verified against
    its manifest first; an ensemble needs every step's model READY, and names those that are not."""
    assert mv.config_dir is not None
    if is_engine_dir(mv.path):
        verify_engine_dir(mv.path)
    config = read_config(mv.config_dir, mv.model)
    if config.kind == "ensemble":
        missing = []
        for step in config.ensemble:
            try:
                resolver(step.model_name, step.model_version)
            except TensorError as err:
                missing.append(f"{step.model_name!r} ({err})")
        if missing:
            raise UserError(
                f"ensemble {mv.model!r} cannot load: its step models are not ready: {'; '.join(missing)}; "
                "add or load them, then load the ensemble"
            )
    return open_model(config, Path(mv.path), resolver)
