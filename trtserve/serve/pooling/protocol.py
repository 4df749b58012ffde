"""The pooling endpoints' request bodies (unknown fields rejected) and response bodies, in the shapes vLLM
serves: rerank as Jina / Cohere (v1 and v2), score as vLLM's text_1 vs text_2, classify and pooling as
vLLM's (docs/pooling.md)."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from trtserve.serve.json_body import JsonBody

MAX_DOCUMENTS = 1024  # documents of one rerank, pairs of one score, inputs of one classify
NonEmpty = Annotated[str, Field(min_length=1)]


class Document(BaseModel):
    """A document given as an object (Jina's and Cohere v1's): its text, and whatever else the client keeps."""

    model_config = ConfigDict(extra="allow")

    text: str


class _Request(JsonBody):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # the repository's default model when left out
    # a prompt longer than this is cut to it (a single text keeps its last tokens, a pair loses its end)
    truncate_prompt_tokens: int | None = Field(None, ge=1)
    user: str | None = None  # routing stickiness, as on the other /v1 routes


class RerankRequest(_Request):
    """POST /v1/rerank, /rerank (Jina, Cohere v1) and /v2/rerank (Cohere v2)."""

    query: NonEmpty
    documents: list[str | Document] = Field(min_length=1, max_length=MAX_DOCUMENTS)
    top_n: int | None = Field(None, ge=0)  # the best top_n results; None or 0: all of them
    return_documents: bool = True  # each result carries its document
    max_tokens_per_doc: int | None = Field(None, ge=1)  # Cohere v2's: the same as truncate_prompt_tokens
    rank_fields: list[str] | None = None  # Cohere v1's; the document's `text` is what is ranked
    # sent by the Cohere SDK and ignored: a document is never chunked, requests run in arrival order
    max_chunks_per_doc: int | None = None
    relevant_spans: Any = None
    priority: int | None = None

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]

    @property
    def truncation(self) -> int | None:
        return self.max_tokens_per_doc or self.truncate_prompt_tokens


class ScoreRequest(_Request):
    """POST /v1/score and /score (vLLM's): text_1 against each of text_2 (one to one, or one to many)."""

    text_1: NonEmpty | list[NonEmpty]
    text_2: NonEmpty | list[NonEmpty]

    def pairs(self) -> list[tuple[str, str]]:
        """The (text_1, text_2) pairs in order; ValueError with a sentence when the lists do not pair up."""
        left = [self.text_1] if isinstance(self.text_1, str) else self.text_1
        right = [self.text_2] if isinstance(self.text_2, str) else self.text_2
        if not left or not right:
            raise ValueError("text_1 and text_2 must each hold at least one text")
        if len(left) == 1:
            left = left * len(right)
        if len(left) != len(right):
            raise ValueError(
                f"text_1 has {len(left)} texts and text_2 {len(right)}; give one text_1, or as many as text_2"
            )
        if len(right) > MAX_DOCUMENTS:
            raise ValueError(f"{len(right)} pairs; send at most {MAX_DOCUMENTS} per call")
        return list(zip(left, right, strict=True))


class ClassifyRequest(_Request):
    """POST /classify and /v1/classify (vLLM's), and /pooling (raw outputs)."""

    input: NonEmpty | Annotated[list[NonEmpty], Field(min_length=1, max_length=MAX_DOCUMENTS)]

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def rerank_response(
    model: str, body: RerankRequest, scores: list[float], tokens: int, api_version: str | None = None
) -> dict[str, Any]:
    """Results best first (ties keep document order), each with its index and relevance_score."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if body.top_n:
        order = order[: body.top_n]
    results = []
    for i in order:
        r: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if body.return_documents:
            d = body.documents[i]
            r["document"] = {"text": d} if isinstance(d, str) else d.model_dump()
        results.append(r)
    out: dict[str, Any] = {"id": _id("rerank"), "model": model, "results": results, "usage": {"total_tokens": tokens}}
    if api_version is not None:  # Cohere's meta, which its SDK reads
        out["meta"] = {"api_version": {"version": api_version}, "billed_units": {"search_units": 1}}
    return out


def _list(prefix: str, model: str, data: list[dict], tokens: int) -> dict[str, Any]:
    return {
        "id": _id(prefix),
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }


def score_response(model: str, scores: list[float], tokens: int) -> dict[str, Any]:
    return _list("score", model, [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)], tokens)


def classify_response(model: str, labels: list[str], probs: list[list[float]], tokens: int) -> dict[str, Any]:
    data = []
    for i, p in enumerate(probs):
        best = max(range(len(p)), key=p.__getitem__)
        data.append({"index": i, "label": labels[best], "probs": p, "num_classes": len(p)})
    return _list("classify", model, data, tokens)


def pooling_response(model: str, outputs: list[list[float]], tokens: int) -> dict[str, Any]:
    data = [{"index": i, "object": "pooling", "data": v} for i, v in enumerate(outputs)]
    return _list("pool", model, data, tokens)
