"""The model kinds a repository serves, one declarative entry each: what a version dir of the kind
holds, how it is loaded, which front ends serve it and how KServe / gRPC address its tensors, and
which series it has on /metrics. The repository, the front ends and the metrics ask a version's
kind (`mv.kind`); none of them tests for a type.

Adding a kind (pooling, vision) is one entry in KINDS: its detector, its opener (which returns the
served model: something with `health()` and `shutdown()`), its front ends, the tensors it answers
KServe / gRPC with, and its metrics hooks. Detectors run in KINDS' order; the entry without one
(the LLM) takes every engine dir the others did not claim.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from trtserve.engine.run_config import RuntimeConfig
from trtserve.serve.telemetry.metrics import Metrics


class Served(Protocol):
    """What a loaded version holds, whatever its kind: an LLM's Engine, a tensor model's TensorModel."""

    def health(self) -> bool: ...

    def shutdown(self) -> None: ...


class Version(Protocol):
    """What an opener reads of the version it opens (serve/repository/version.py: ModelVersion, which
    imports this table, so the table names only what it needs)."""

    model: str
    version: int
    path: Path
    config_dir: Path | None


class Repo(Protocol):
    """What an opener asks of the repository (serve/repository/repository.py, which imports this table)."""

    factory: Callable[[Path, RuntimeConfig], Served]  # the engine factory: opens an engine dir

    def resolve(self, name: str, version: int) -> Any: ...


class FrontEnd(StrEnum):
    """The routes a kind may be asked on; any other answers 400 (404 for /v1/embeddings)."""

    GENERATE = "generate"  # text: OpenAI completions / chat / responses, KServe generate, batch jobs
    INFER = "infer"  # KServe v2 and gRPC: metadata, config, infer, stream infer
    EMBEDDINGS = "embeddings"  # POST /v1/embeddings (a model whose config is an embedder)
    POOLING = "pooling"  # /v1/rerank, /v2/rerank, /v1/score, /classify over a pooling engine (serve/pooling/)


class Tensors(StrEnum):
    """What KServe / gRPC infer, metadata and config address."""

    TEXT = "text"  # text_input -> text_output over its GenerationService; gRPC streams are decoupled
    CONFIG = "config"  # its config.pbtxt's inputs and outputs (serve/tensors/); one response per request
    POOLED = "pooled"  # text, or query + document, in; embedding / logits / score out (serve/kserve/pooling.py)


Detector = Callable[[Path, Path], Path | None]  # (model dir, version dir) -> its config dir, or None
Opener = Callable[[Repo, Version, RuntimeConfig], Served]  # blocking: a worker thread runs it
MetricsHook = Callable[[Metrics, Version, Any], None]  # (metrics, version, its served model)


@dataclass(frozen=True)
class ModelKind:
    name: str  # "llm", "tensor"
    noun: str  # how messages name it: "an LLM", "a tensor model"
    accepts: str  # what a version dir of this kind holds (docs, messages)
    detect: str | None  # "module:function" -> Detector; None: the fallback for any engine dir
    opener: str  # "module:function" -> Opener
    front_ends: frozenset[FrontEnd]
    tensors: Tensors
    kv_cache: bool  # takes a share of --kv-cache-memory (serve/repository/budget.py)
    add_metrics: MetricsHook
    remove_metrics: MetricsHook
    hint: str = ""  # where a route it does not serve should send its requests ({model}: its name)
    images: bool = False  # its prompts may hold images (docs/vision.md; the engine's EngineInfo.vision says how)

    def serves(self, front_end: FrontEnd) -> bool:
        return front_end in self.front_ends

    def detects(self, model_dir: Path, version_dir: Path) -> Path | None:
        return None if self.detect is None else _load(self.detect)(model_dir, version_dir)

    def open(self, repo: Repo, mv: Version, run: RuntimeConfig) -> Served:
        """Open `mv` (blocking); raises with a sentence (UserError) when its files are bad."""
        return _load(self.opener)(repo, mv, run)


def _load(ref: str) -> Callable:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def open_llm(repo: Repo, mv: Version, run: RuntimeConfig) -> Served:
    """The repository's engine factory: verify the dir, open the engine its backend names."""
    return repo.factory(mv.path, run)


def _add_engine(metrics: Metrics, mv: Version, engine) -> None:
    metrics.add_engine(mv.model, str(mv.version), engine.stats)


def _remove_engine(metrics: Metrics, mv: Version, engine) -> None:
    metrics.remove_engine(mv.model, str(mv.version), engine.stats)  # a replacement may be registered already


def _add_tensor(metrics: Metrics, mv: Version, model) -> None:
    metrics.add_tensor(mv.model, str(mv.version), model.stats)


def _remove_tensor(metrics: Metrics, mv: Version, model) -> None:
    metrics.remove_tensor(mv.model, str(mv.version), model.stats)


TENSOR = ModelKind(
    name="tensor",
    noun="a tensor model",
    accepts="a Triton model dir (config.pbtxt, <version>/model.onnx|model.py) or a tensor engine dir",
    detect="trtserve.serve.repository.scan:config_dir",
    opener="trtserve.serve.repository.tensors:open_tensor",
    front_ends=frozenset({FrontEnd.INFER, FrontEnd.EMBEDDINGS}),
    tensors=Tensors.CONFIG,
    kv_cache=False,
    add_metrics=_add_tensor,
    remove_metrics=_remove_tensor,
    hint="send its inputs to POST /v2/models/{model}/infer (KServe v2, or gRPC ModelInfer)",
)
LLM = ModelKind(
    name="llm",
    noun="an LLM",
    accepts="an LLM engine dir (`trtserve build MODEL`)",
    detect=None,
    opener="trtserve.serve.repository.kinds:open_llm",
    front_ends=frozenset({FrontEnd.GENERATE, FrontEnd.INFER}),
    tensors=Tensors.TEXT,
    kv_cache=True,
    add_metrics=_add_engine,
    remove_metrics=_remove_engine,
)
POOLING = ModelKind(
    name="pooling",
    noun="a pooling model",
    accepts="a pooling engine dir (`trtserve build MODEL --pooling embed|classify|rerank`, docs/pooling.md)",
    detect="trtserve.serve.pooling.kind:pooling_dir",
    opener="trtserve.serve.repository.kinds:open_llm",  # the same engine, running prefill-only requests
    front_ends=frozenset({FrontEnd.POOLING, FrontEnd.EMBEDDINGS}),
    tensors=Tensors.POOLED,  # KServe REST infer only (serve/kserve/routes.py); gRPC refuses it (no INFER)
    kv_cache=True,
    add_metrics=_add_engine,
    remove_metrics=_remove_engine,
    hint="it serves POST /v1/embeddings, /v1/rerank, /v1/score or /classify (docs/pooling.md)",
)
VISION = ModelKind(
    name="vision",
    noun="a vision-language model",
    accepts="a vision-language engine dir (`trtserve build` of a Llava, Idefics3 or Gemma 3 checkpoint, docs/vision.md)",
    detect="trtserve.serve.images:vision_dir",
    opener="trtserve.serve.repository.kinds:open_llm",  # the LLM's engine, its prompts with images
    front_ends=frozenset({FrontEnd.GENERATE, FrontEnd.INFER}),
    tensors=Tensors.TEXT,
    kv_cache=True,
    add_metrics=_add_engine,
    remove_metrics=_remove_engine,
    images=True,
)
KINDS: dict[str, ModelKind] = {k.name: k for k in (TENSOR, POOLING, VISION, LLM)}  # detection order: the fallback last


def detect(model_dir: Path, version_dir: Path) -> tuple[ModelKind, Path | None]:
    """The kind of a version dir, and the dir its config lives in (None: the kind has none)."""
    for kind in KINDS.values():
        if kind.detect is None:
            return kind, None
        found = kind.detects(model_dir, version_dir)
        if found is not None:
            return kind, found
    raise AssertionError("KINDS ends with a fallback kind")
