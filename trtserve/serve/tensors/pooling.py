"""Tensor models behind the pooling endpoints (docs/pooling.md, "Tensor models"): an ONNX cross-encoder or
sequence classifier, or a BERT-like embedder, reached by /v1/rerank, /v1/score, /classify and /pooling.

A tensor model declares what it pools in its config.pbtxt's parameters (`TensorPoolingSpec.of`); each
text or (query, document) pair of a call is its own infer request, all sent at once, so the model's
dynamic batcher batches them, as /v1/embeddings does. Its tokenizer is a step of the model (an
ensemble's), so text goes in as BYTES and the server never tokenizes for it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtserve.engine.pooling import sigmoid, softmax
from trtserve.serve.errors import APIError
from trtserve.serve.tensors.embedding_spec import EmbeddingSpec
from trtserve.serve.tensors.serving import TensorServing
from trtserve.tensor.types import TensorModelConfig

if TYPE_CHECKING:
    from trtserve.serve.repository.version import ModelVersion

TASKS = ("classify", "embed")
HOW = (
    'declare it in its config.pbtxt: parameters { key: "pooling_task" value: { string_value: "classify" } } with '
    "text_input and/or text_pair_inputs (docs/pooling.md, Tensor models)"
)


@dataclass(frozen=True)
class TensorPoolingSpec:
    """What a tensor model's config says about pooling it."""

    task: str  # "classify" (logits, one per label) or "embed" (one vector)
    output: str  # the FP32 output: the logits, or the embedding
    labels: tuple[str, ...]  # classify: one per logit (the output's label_filename, else LABEL_i)
    text_input: str | None  # the BYTES input one text goes to (classify, embed)
    pair_inputs: tuple[str, str] | None  # the BYTES inputs a (query, document) pair goes to (a cross-encoder)

    @property
    def scores(self) -> bool:
        """It scores pairs: a one-label classifier over pairs (a cross-encoder), or an embedder (cosine)."""
        if self.task == "embed":
            return self.text_input is not None
        return self.pair_inputs is not None and len(self.labels) == 1

    @classmethod
    def of(cls, config: TensorModelConfig) -> TensorPoolingSpec | None:
        """The spec from `pooling_task`, `text_input`, `text_pair_inputs`, `logits_output`; an embedder
        (/v1/embeddings' EmbeddingSpec with a text input) without them. None: the model pools nothing;
        ValueError with a sentence when the parameters are inconsistent."""
        p = config.parameters
        task = p.get("pooling_task")
        if task is None:
            emb = EmbeddingSpec.of(config)
            if emb is None or emb.text_input is None:
                return None
            return cls("embed", emb.output, (), emb.text_input, None)
        if task not in TASKS:
            raise ValueError(f"pooling_task is {task!r}; give one of {', '.join(TASKS)}")
        floats = [t for t in config.outputs if t.datatype == "FP32"]
        name = p.get("logits_output") or (floats[0].name if len(floats) == 1 else None)
        out = config.output(name) if name else None
        if out is None or out.datatype != "FP32" or not out.dims or out.dims[-1] <= 0:
            raise ValueError("logits_output must name an FP32 output with a fixed last dim (one model has one)")
        text = p.get("text_input")
        pair = tuple(n.strip() for n in p["text_pair_inputs"].split(",")) if "text_pair_inputs" in p else None
        for n in [text, *(pair or ())]:
            spec = config.input(n) if n else None
            if n and (spec is None or spec.datatype != "BYTES"):
                raise ValueError(f"input {n!r} (text_input / text_pair_inputs) must be a BYTES input of the model")
        if pair is not None and len(pair) != 2:
            raise ValueError('text_pair_inputs must name two BYTES inputs, "query,document"')
        if text is None and pair is None:
            raise ValueError("a pooling tensor model needs text_input, text_pair_inputs or both")
        size = out.dims[-1]
        labels = out.labels if out.labels and len(out.labels) == size else tuple(f"LABEL_{i}" for i in range(size))
        return cls(task, out.name, labels, text, pair)  # type: ignore[arg-type]


class TensorPooling:
    """The pooling endpoints' serving logic over one tensor model version (serve/pooling/serving.py's
    PoolingServing has the same methods over a pooling engine)."""

    def __init__(self, mv: ModelVersion, spec: TensorPoolingSpec):
        self.mv, self.spec, self.model = mv, spec, mv.model
        self.task = spec.task

    @classmethod
    def route(cls, mv: ModelVersion, endpoint: str) -> TensorPooling:
        serving = TensorServing.of(mv)  # 503 if it was unloaded since routing
        try:
            spec = TensorPoolingSpec.of(serving.config)
        except ValueError as err:
            raise APIError(400, f"model {mv.model!r} cannot serve {endpoint}: {err}", "model") from None
        if spec is None:
            raise APIError(
                400,
                f"model {mv.model!r} is a tensor model that declares no pooling task and serves KServe infer "
                f"(POST /v2/models/{mv.model}/infer); for {endpoint}, {HOW}",
                "model",
            )
        return cls(mv, spec)

    @property
    def labels(self) -> list[str]:
        return list(self.spec.labels)

    def _refuse(self, endpoint: str, why: str) -> APIError:
        return APIError(400, f"model {self.model!r} {why}, so it does not serve {endpoint}; {HOW}", "model")

    @staticmethod
    def _no_truncation(truncate: int | None) -> None:
        if truncate is not None:
            raise APIError(
                400,
                "truncate_prompt_tokens (max_tokens_per_doc) is not supported by tensor models: their tokenizer "
                "step truncates; leave it out",
                "truncate_prompt_tokens",
            )

    async def _infer(self, inputs: list[dict[str, str]]) -> list[np.ndarray]:
        """Each input dict (name -> text) as one infer request, all at once; the output per request, flat."""
        serving = TensorServing.of(self.mv)
        lead = (1,) if serving.config.max_batch_size > 0 else ()

        def tensor(text: str) -> np.ndarray:
            return np.array([text.encode()], dtype=np.object_).reshape(*lead, 1)

        asked = [(self.spec.output, {})]
        calls = [serving.infer({k: tensor(v) for k, v in i.items()}, {}, asked) for i in inputs]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            raise failed  # every request has ended: nothing is left running
        return [np.asarray(a[self.spec.output], dtype=np.float64).reshape(-1) for a in answers]

    async def _texts(self, texts: list[str], endpoint: str) -> list[np.ndarray]:
        if self.spec.text_input is None:
            raise self._refuse(endpoint, "takes (query, document) pairs only (it has no text_input)")
        return await self._infer([{self.spec.text_input: t} for t in texts])

    async def pair_scores(
        self, pairs: list[tuple[str, str]], truncate: int | None, endpoint: str
    ) -> tuple[list[float], int]:
        """A cross-encoder's sigmoid(logit) per pair; an embedder's cosine similarity. Usage counts 0 tokens:
        the tokenizer runs inside the model."""
        self._no_truncation(truncate)
        if not self.spec.scores:
            raise self._refuse(endpoint, "is no one-label pair classifier (a cross-encoder) nor an embedder")
        if self.task == "embed":
            texts = sorted({t for p in pairs for t in p})
            vec = dict(zip(texts, await self._texts(texts, endpoint), strict=True))
            return [_cosine(vec[a], vec[b]) for a, b in pairs], 0
        q, d = self.spec.pair_inputs  # type: ignore[misc]
        logits = await self._infer([{q: a, d: b} for a, b in pairs])
        return [sigmoid(float(v[0])) for v in logits], 0

    async def classify(self, texts: list[str], truncate: int | None) -> tuple[list[list[float]], int]:
        self._no_truncation(truncate)
        if self.task != "classify":
            raise self._refuse("/classify", "is an embedder")
        logits = await self._texts(texts, "/classify")
        if len(self.spec.labels) == 1:
            return [[sigmoid(float(v[0]))] for v in logits], 0
        return [softmax([float(x) for x in v]) for v in logits], 0

    async def raw(self, texts: list[str], truncate: int | None) -> tuple[list[list[float]], int]:
        """/pooling: each text's output (the logits, or the embedding) as the model returns it."""
        self._no_truncation(truncate)
        return [[float(x) for x in v] for v in await self._texts(texts, "/pooling")], 0


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))
