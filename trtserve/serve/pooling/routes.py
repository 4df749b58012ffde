"""The pooling routes (docs/pooling.md): thin adapters from each API's body onto PoolingServing."""

from __future__ import annotations

from fastapi import APIRouter, Request

from trtserve.serve.errors import APIError, error_responses
from trtserve.serve.pooling.protocol import (
    ClassifyRequest,
    RerankRequest,
    ScoreRequest,
    classify_response,
    pooling_response,
    rerank_response,
    score_response,
)
from trtserve.serve.pooling.serving import PoolingServing, observed

router = APIRouter()
_RESPONSES = error_responses(400, 401, 404, 413, 429, 503, 504)


async def _rerank(body: RerankRequest, request: Request, endpoint: str, api_version: str | None) -> dict:
    async with observed(request, "rerank", len(body.documents)) as usage:
        serving = PoolingServing.route(request, body.model, body.user, endpoint)
        pairs = [(body.query, d) for d in body.texts()]
        scores, usage["tokens"] = await serving.pair_scores(pairs, body.truncation, endpoint)
    return rerank_response(serving.model, body, scores, usage["tokens"], api_version)


@router.post("/v1/rerank", responses=_RESPONSES)
async def rerank_v1(body: RerankRequest, request: Request):
    """Jina's and Cohere v1's rerank: the documents by relevance to the query, best first."""
    return await _rerank(body, request, "/v1/rerank", "1")


@router.post("/rerank", responses=_RESPONSES)
async def rerank(body: RerankRequest, request: Request):
    """/v1/rerank's alias (Jina's path)."""
    return await _rerank(body, request, "/rerank", None)


@router.post("/v2/rerank", responses=_RESPONSES)
async def rerank_v2(body: RerankRequest, request: Request):
    """Cohere v2's rerank."""
    return await _rerank(body, request, "/v2/rerank", "2")


async def _score(body: ScoreRequest, request: Request) -> dict:
    try:
        pairs = body.pairs()
    except ValueError as err:
        raise APIError(400, str(err), "text_2") from None
    async with observed(request, "score", len(pairs)) as usage:
        serving = PoolingServing.route(request, body.model, body.user, "/v1/score")
        scores, usage["tokens"] = await serving.pair_scores(pairs, body.truncate_prompt_tokens, "/v1/score")
    return score_response(serving.model, scores, usage["tokens"])


@router.post("/v1/score", responses=_RESPONSES)
async def score_v1(body: ScoreRequest, request: Request):
    """vLLM's score: text_1 against each text_2 (one to one, or one to many)."""
    return await _score(body, request)


@router.post("/score", responses=_RESPONSES)
async def score(body: ScoreRequest, request: Request):
    """/v1/score's alias."""
    return await _score(body, request)


async def _classify(body: ClassifyRequest, request: Request) -> dict:
    async with observed(request, "classify", len(body.texts())) as usage:
        serving = PoolingServing.route(request, body.model, body.user, "/classify")
        probs, usage["tokens"] = await serving.classify(body.texts(), body.truncate_prompt_tokens)
    return classify_response(serving.model, serving.labels, probs, usage["tokens"])


@router.post("/classify", responses=_RESPONSES)
async def classify(body: ClassifyRequest, request: Request):
    """vLLM's classify: each input's label and the probabilities of all labels (the head's id2label)."""
    return await _classify(body, request)


@router.post("/v1/classify", responses=_RESPONSES)
async def classify_v1(body: ClassifyRequest, request: Request):
    """/classify's alias (Dynamo's path)."""
    return await _classify(body, request)


@router.post("/pooling", responses=_RESPONSES)
async def pooling(body: ClassifyRequest, request: Request):
    """The engine's raw pooled output per input: a vector (embed) or the head's logits (classify, rerank)."""
    async with observed(request, "pooling", len(body.texts())) as usage:
        serving = PoolingServing.route(request, body.model, body.user, "/pooling")
        outputs, usage["tokens"] = await serving.raw(body.texts(), body.truncate_prompt_tokens)
    return pooling_response(serving.model, outputs, usage["tokens"])
