"""LoRA adapters as models of the repository: an adapter's name routes to its base model's version,
seen through a GenerationService bound to the adapter (GenerationService.under).

An adapter belongs to the engines that serve it (Engine.adapters); the repository keeps no list of
its own, so what it lists and routes to is what the engines serve now. Model names win: an adapter
may not take a served model's name (`check_name`).
"""

from __future__ import annotations

from dataclasses import replace

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.errors import UserError
from trtserve.serve.errors import APIError
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.version import ModelVersion, State


def served(models: dict[str, RepoModel]) -> list[tuple[ModelVersion, AdapterRef]]:
    """Every (ready version, adapter it serves), in the repository's order."""
    return [(mv, ref) for m in models.values() for mv in m.ready_versions() for ref in _adapters(mv)]


def base_of(models: dict[str, RepoModel], name: str) -> RepoModel | None:
    """The model whose ready versions serve adapter `name`; None when none does (or it is a model)."""
    if name in models:
        return None
    return next((models[mv.model] for mv, ref in served(models) if ref.name == name), None)


def bind(mv: ModelVersion, name: str) -> ModelVersion:
    """`mv` answering as adapter `name`: a copy whose service runs every request under the adapter
    (state, statistics and draining stay the original's). 404 when this version does not serve it."""
    ref = next((r for r in _adapters(mv) if r.name == name), None)
    if ref is None or mv.service is None:
        raise APIError(404, f"model {name!r} is not served by {mv.name}; GET /v1/models lists what is", "model")
    return replace(mv, service=mv.service.under(ref))


def index_entries(models: dict[str, RepoModel]) -> list[dict]:
    """Triton's RepositoryIndex entries of the served adapters: READY at their base's version."""
    return [
        {
            "name": ref.name,
            "version": str(mv.version),
            "state": State.READY.value,
            "reason": f"LoRA adapter on {mv.model}",
        }
        for mv, ref in served(models)
    ]


def check_name(models: dict[str, RepoModel], name: str, base: str) -> None:
    """UserError when adapter `name` would shadow a served model or another model's adapter."""
    if name in models:
        raise UserError(f"adapter name {name!r} is a model this server serves; give the adapter another name")
    other = base_of(models, name)
    if other is not None and other.name != base:
        raise UserError(f"adapter {name!r} is already served on model {other.name!r}; give this one another name")


def _adapters(mv: ModelVersion) -> list[AdapterRef]:
    engine = mv.engine
    return engine.adapters() if engine is not None and engine.info.capabilities.lora else []
