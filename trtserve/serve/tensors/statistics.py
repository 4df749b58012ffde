"""Triton's statistics extension over the repository: one `model_stats` entry per loaded version,
tensor models from their ModelStatistics, LLM versions from their GenerationService's
InferStatistics in the same shape (each prompt one inference and one execution)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtserve.serve.errors import APIError
from trtserve.serve.telemetry.statistics import InferStatistics
from trtserve.tensor.stats import DURATIONS, Duration

if TYPE_CHECKING:
    from trtserve.serve.repository.repository import Repository
    from trtserve.serve.repository.version import ModelVersion


def llm_entry(name: str, version: str, s: InferStatistics) -> dict:
    return {
        "name": name,
        "version": version,
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.inference_count,  # each request runs as its own sequence
        "inference_stats": {d: getattr(s, d).to_json() for d in DURATIONS}
        | {"cache_hit": Duration().to_json(), "cache_miss": Duration().to_json()},
        "batch_stats": [],
    }


def entry(mv: ModelVersion) -> dict | None:
    """The version's entry; None when it is not loaded."""
    if mv.tensor is not None:
        return mv.tensor.stats.to_json(mv.model, str(mv.version))
    if mv.service is not None:
        return llm_entry(mv.model, str(mv.version), mv.service.statistics)
    return None


def model_stats(repo: Repository, name: str | None, version: str | None) -> list[dict]:
    """Entries for every loaded version of every model (no name), of one model, or of one version
    (404 for an unknown model or version, 400 for a version that is not loaded), as Triton answers."""
    if not name:
        versions = repo.versions()
    else:
        m = repo.model(name)
        if version:
            if not (version.isascii() and version.isdigit()):
                raise APIError(400, f"version {version!r} is not a version number; give a positive integer")
            mv = m.version(int(version))
            found = entry(mv)
            if found is None:
                raise APIError(400, f"model {mv.name} is {mv.state.value}, not loaded; load it to see its statistics")
            return [found]
        versions = [mv for _, mv in sorted(m.versions.items())]
    return [e for e in map(entry, versions) if e is not None]
