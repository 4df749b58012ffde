"""The serving logic of pooling models: texts -> token prompts -> prefill-only engine requests -> scores.

Every prompt of a call is its own engine request with `RequestOptions(pooling=task)`, all submitted at
once, so the engine's scheduler batches them with each other and with other requests (and a rerank's
documents share the cached blocks of their common query prefix). The engine declares what it pools
(`engine.info.pooling`, engine/pooling.py); this module turns its raw outputs into what each endpoint
answers: a reranker's yes - no logit and a one-label classifier's logit through a sigmoid, a classifier's
logits through a softmax, two embeddings' cosine similarity.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from fastapi import Request

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.pooling import PoolingConfig, sigmoid
from trtserve.engine.protocol import Engine
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.serve.context import request_context
from trtserve.serve.errors import APIError
from trtserve.serve.repository.kinds import FrontEnd, Tensors
from trtserve.serve.repository.lookup import routed
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.tensors.pooling import TensorPooling
from trtserve.text.pooling import pair_ids, probabilities, text_ids

_PREFILL_ONLY = SamplingParams(max_tokens=1, temperature=0.0)
_ROUTED = "trtserve.pooling.routed"  # the ASGI scope entry holding the version a pooling call routed to


@dataclass
class Pooled:
    outputs: list[list[float]]  # per prompt: the engine's pooled output (engine/pooling.py)
    tokens: int  # prompt tokens of all of them


class PoolingServing:
    """One routed pooling model version, for one call."""

    def __init__(self, mv: ModelVersion, request: Request):
        self.mv = mv
        self.engine: Engine = mv.served_model  # the pooling kind's served model is its engine
        self.config: PoolingConfig = self.engine.info.pooling
        self.model = mv.model
        self.timeout = request.app.state.server.config.request_timeout

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def labels(self) -> list[str]:
        return self.config.labels

    @classmethod
    def route(
        cls, request: Request, model: str | None, user: str | None, endpoint: str
    ) -> PoolingServing | TensorPooling:
        """The pooling model `model` names (an engine, or a tensor model that declares a pooling task);
        a 400 saying which endpoints serve another kind."""
        mv = routed(request, model, key=user, front_end=None)
        request.scope[_ROUTED] = mv  # for `observed`'s metrics
        if mv.kind.tensors is Tensors.CONFIG:  # a tensor model whose config declares what it pools, or a 400
            return TensorPooling.route(mv, endpoint)
        if not mv.kind.serves(FrontEnd.POOLING):
            serves = "KServe infer (POST /v2/models/{m}/infer)" if mv.kind.serves(FrontEnd.INFER) else ""
            if mv.kind.serves(FrontEnd.GENERATE):
                serves = "/v1/chat/completions, /v1/completions and /v1/responses"
            raise APIError(
                400,
                f"model {mv.model!r} is {mv.kind.noun} and serves {serves.format(m=mv.model)}; {endpoint} needs "
                "a pooling model (`trtserve build MODEL --pooling embed|classify|rerank`, docs/pooling.md)",
                "model",
            )
        return cls.of(mv, request)

    @classmethod
    def of(cls, mv: ModelVersion, request: Request) -> PoolingServing:
        """A routed pooling engine's serving logic (503 once unloaded); `observed` counts its calls."""
        request.scope[_ROUTED] = mv
        if mv.served_model is None:
            raise APIError(503, f"model {mv.model!r} was unloaded; retry")
        return cls(mv, request)

    def refuse(self, endpoint: str, why: str) -> APIError:
        return APIError(
            400, f"model {self.model!r} is {self.config.describe()}, and {endpoint} {why}; {self.serves()}", "model"
        )

    def serves(self) -> str:
        """Which endpoints this model answers (for messages)."""
        c = self.config
        routes = ["/pooling"]
        if c.task == "embed":
            routes = ["/v1/embeddings", "/v1/score", "/v1/rerank", *routes]
        elif c.scores:
            routes = ["/v1/rerank", "/v1/score", "/classify", *routes]
        else:
            routes = ["/classify", *routes]
        return f"it serves {', '.join(routes)}"

    # ---- prompts ---------------------------------------------------------------------------------
    def _check_length(self, ids: list[int], what: str, truncate: int | None) -> None:
        limit = self.engine.info.max_seq_len - 1
        if truncate is not None and truncate > limit:
            raise APIError(400, f"truncate_prompt_tokens is {truncate}; model {self.model!r} takes at most {limit}")
        if len(ids) > limit:
            raise APIError(
                400,
                f"{what} has {len(ids)} tokens, more than the {limit} model {self.model!r} takes; shorten it or set "
                "truncate_prompt_tokens",
                "input",
            )

    def text_prompt(self, text: str, i: int, truncate: int | None) -> list[int]:
        """One text as a prompt (text/pooling.py), checked against the engine's length."""
        ids = text_ids(self.engine.tokenizer, text, truncate)
        self._check_length(ids, f"input {i}", truncate)
        return ids

    def pair_prompt(self, query: str, document: str, i: int, truncate: int | None) -> list[int]:
        """A (query, document) pair as the model reads it (text/pooling.py), checked against the engine's length."""
        ids = pair_ids(self.engine.tokenizer, self.config, query, document, truncate)
        self._check_length(ids, f"document {i}", truncate)
        return ids

    # ---- running ---------------------------------------------------------------------------------
    async def run(self, prompts: Sequence[list[int]], client_id: str | None = None) -> Pooled:
        """Each prompt's pooled output, all submitted at once; a failure aborts the rest."""
        options = RequestOptions(pooling=self.config.task, client_id=client_id)
        reqs = [GenerateRequest(list(p), _PREFILL_ONLY, options) for p in prompts]
        try:
            for r in reqs:
                self.engine.check(r)
        except UserError as err:
            raise APIError(400, str(err), "input") from None
        self.mv.tensor_in_flight += 1  # counted for draining, as requests without a GenerationService are
        try:
            async with asyncio.timeout(self.timeout):
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(self._one(r)) for r in reqs]
        except TimeoutError:
            raise APIError(504, f"the request ran past its {self.timeout:g} s deadline") from None
        except ExceptionGroup as eg:
            raise eg.exceptions[0] from None
        finally:
            self.mv.tensor_in_flight -= 1
        return Pooled([t.result() for t in tasks], sum(len(p) for p in prompts))

    async def _one(self, req: GenerateRequest) -> list[float]:
        pooled = None
        stream = self.engine.generate(req)
        try:
            async for d in stream:
                if d.error is not None:
                    raise APIError(500, f"the engine failed the request: {d.error}")
                if d.pooled is not None:
                    pooled = d.pooled
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # leaving early aborts it
        if pooled is None:
            raise APIError(500, "the engine finished a pooling request without its output")
        return pooled

    # ---- what each endpoint asks -----------------------------------------------------------------
    async def pair_scores(
        self, pairs: list[tuple[str, str]], truncate: int | None, endpoint: str
    ) -> tuple[list[float], int]:
        """A relevance score in [0, 1] per pair (a cosine similarity in [-1, 1] for an embedding model)."""
        c = self.config
        if c.task == "embed":
            texts = sorted({t for p in pairs for t in p})
            pooled = await self.run([self.text_prompt(t, i, truncate) for i, t in enumerate(texts)])
            vec = {t: np.asarray(v, dtype=np.float64) for t, v in zip(texts, pooled.outputs, strict=True)}
            return [_cosine(vec[a], vec[b]) for a, b in pairs], pooled.tokens
        if not c.scores:
            raise self.refuse(endpoint, f"needs a reranker or a one-label classifier (it has {c.dimensions} labels)")
        pooled = await self.run([self.pair_prompt(q, d, i, truncate) for i, (q, d) in enumerate(pairs)])
        return [sigmoid(v[0]) for v in pooled.outputs], pooled.tokens

    async def classify(self, texts: list[str], truncate: int | None) -> tuple[list[list[float]], int]:
        if self.config.task == "embed":
            raise self.refuse("/classify", "needs a classifier")
        pooled = await self.run([self.text_prompt(t, i, truncate) for i, t in enumerate(texts)])
        return [probabilities(self.config, v) for v in pooled.outputs], pooled.tokens

    async def raw(self, texts: list[str], truncate: int | None) -> tuple[list[list[float]], int]:
        """/pooling: the engine's pooled output per text."""
        pooled = await self.run([self.text_prompt(t, i, truncate) for i, t in enumerate(texts)])
        return pooled.outputs, pooled.tokens

    async def embed(self, items: list[str] | list[list[int]], dimensions: int | None) -> tuple[list[np.ndarray], int]:
        """Each input's embedding, `dimensions` long (the leading ones, renormalized)."""
        c = self.config
        if c.task != "embed":
            raise APIError(
                404, f"model {self.model!r} is {c.describe()}, not an embedding model; {self.serves()}", "model"
            )
        size = c.dimensions
        if dimensions is not None and (dimensions > size or (dimensions < size and not c.normalize)):
            allowed = f"at most {size}" if c.normalize else f"exactly {size}"
            raise APIError(400, f"dimensions is {dimensions}; model {self.model!r} gives {allowed}", "dimensions")
        prompts = [self.text_prompt(x, i, None) if isinstance(x, str) else list(x) for i, x in enumerate(items)]
        if any(not isinstance(x, str) for x in items):
            for i, p in enumerate(prompts):
                self._check_length(p, f"input {i}", None)
        pooled = await self.run(prompts)
        vectors = [np.asarray(v, dtype=np.float32) for v in pooled.outputs]
        if dimensions is not None and dimensions < size:  # Matryoshka: the leading dimensions, unit length again
            vectors = [v[:dimensions] / max(float(np.linalg.norm(v[:dimensions])), 1e-12) for v in vectors]
        return vectors, pooled.tokens


@contextlib.asynccontextmanager
async def traced(request: Request, task: str, inputs: int, mv: ModelVersion | None = None):
    """One pooling call's span under the request's server span (docs/observability.md): the body sets
    `usage["tokens"]`; `mv`: the version it runs on, else the one `route` recorded (refused before routing:
    no span)."""
    span, began, usage = request_context(request.scope).span, time.monotonic(), {"tokens": 0}
    error = None
    try:
        yield usage
    except Exception as err:
        error = getattr(err, "message", None) or type(err).__name__
        raise
    finally:
        if mv is None:
            mv = request.scope.get(_ROUTED)
        if mv is not None:
            name = f"{_OPERATIONS.get(task, task)} {mv.model}"
            span.record(name, began, time.monotonic(), lambda: _span_attributes(mv, task, inputs, usage), error)


_OPERATIONS = {"embed": "embeddings"}  # gen_ai.operation.name where OpenTelemetry's GenAI conventions name one


def _span_attributes(mv: ModelVersion, task: str, inputs: int, usage: dict) -> dict:
    return {
        "gen_ai.operation.name": _OPERATIONS.get(task, task),
        "gen_ai.provider.name": "trtserve",
        "gen_ai.request.model": mv.model,
        "gen_ai.usage.input_tokens": usage["tokens"],
        "trtserve.model_version": str(mv.version),
        "trtserve.pooling.task": task,
        "trtserve.pooling.documents": inputs,
    }


@contextlib.asynccontextmanager
async def observed(request: Request, task: str, inputs: int):
    """Count one pooling call on /metrics by `task` (serve/telemetry/pooling_metrics.py) and trace it
    (`traced`): the body sets `usage["tokens"]`; a call that raises counts as an error (refused before
    routing: not counted)."""
    start = time.monotonic()
    ok = False
    try:
        async with traced(request, task, inputs) as usage:
            yield usage
        ok = True
    finally:
        mv = request.scope.get(_ROUTED)
        metrics = request.app.state.server.metrics
        if mv is not None and metrics is not None:
            seconds = time.monotonic() - start
            metrics.pooling.observe(mv.model, str(mv.version), task, inputs, usage["tokens"], seconds, ok)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))


async def pooled_embeddings(
    request: Request, mv: ModelVersion, items: list[str] | list[list[int]], dimensions: int | None
) -> tuple[list[np.ndarray], int]:
    """/v1/embeddings over a pooling model (serve/openai/embeddings.py asks the kind, then calls this)."""
    request.scope[_ROUTED] = mv
    async with observed(request, "embed", len(items)) as usage:
        vectors, usage["tokens"] = await PoolingServing(mv, request).embed(items, dimensions)
    return vectors, usage["tokens"]
