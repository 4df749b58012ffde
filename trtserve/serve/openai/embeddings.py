"""POST /v1/embeddings over a tensor model (an embedder ensemble, or an ONNX encoder): each input of
a call is its own infer request, all sent at once, so the model's dynamic batcher batches them.

Texts go to the model's BYTES input; token arrays go to its (ids, mask) tensors, which for an
ensemble are its tokenizer step's outputs (that step is then skipped). See docs/tensor-models.md,
"Embeddings".
"""

from __future__ import annotations

import asyncio

import numpy as np
from fastapi import APIRouter, Request

from trtserve.serve.errors import APIError, error_responses
from trtserve.serve.openai.embeddings_protocol import EmbeddingRequest, response
from trtserve.serve.pooling.serving import pooled_embeddings, traced
from trtserve.serve.repository.kinds import FrontEnd
from trtserve.serve.repository.lookup import routed
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.tensors.embedding_spec import EmbeddingSpec
from trtserve.serve.tensors.serving import TensorServing

router = APIRouter()


def _examples(request: Request) -> str:
    names = sorted(
        {
            mv.model
            for mv in request.app.state.server.repository.versions()
            if mv.kind.serves(FrontEnd.EMBEDDINGS)
            and (
                (mv.tensor is not None and EmbeddingSpec.of(mv.tensor.config) is not None)
                or (mv.kind.serves(FrontEnd.POOLING) and mv.ready and mv.served_model.info.pooling.task == "embed")
            )
        }
    )
    return f"e.g. {', '.join(repr(n) for n in names)}" if names else "and this server has none loaded"


def _spec(request: Request, mv: ModelVersion) -> EmbeddingSpec:
    if not mv.kind.serves(FrontEnd.EMBEDDINGS):
        raise APIError(
            404,
            f"model {mv.model!r} is {mv.kind.noun}; /v1/embeddings needs an embedding model, {_examples(request)}",
            "model",
        )
    serving = TensorServing.of(mv)  # 503 if it was unloaded since routing
    spec = EmbeddingSpec.of(serving.config)
    if spec is None:
        raise APIError(
            404,
            f"model {mv.model!r} is not an embedding model (a text or token-id input, one FP32 vector out); "
            f"/v1/embeddings needs one, {_examples(request)}",
            "model",
        )
    return spec


def _dimensions(body: EmbeddingRequest, spec: EmbeddingSpec, model: str) -> int:
    d = body.dimensions
    if d is None or d == spec.size:
        return spec.size
    if not spec.matryoshka:
        raise APIError(
            400,
            f"model {model!r} gives {spec.size}-dimensional embeddings and does not allow fewer; "
            f"leave dimensions out or set it to {spec.size}",
            "dimensions",
        )
    if d > spec.size:
        raise APIError(400, f"dimensions is {d}, but model {model!r} gives at most {spec.size}", "dimensions")
    return d


def _requests(body: EmbeddingRequest, spec: EmbeddingSpec, model: str, batched: bool) -> tuple[list[dict], int]:
    """One input dict per item (a batch dim of 1 where the model batches), and the token count of
    token arrays (texts are counted from the model's mask output)."""
    lead = (1,) if batched else ()
    items = body.items()
    if isinstance(items[0], str):
        if spec.text_input is None:
            raise APIError(400, f"model {model!r} embeds token arrays only; send token ids as input", "input")
        return [{spec.text_input: np.array([t.encode()], dtype=np.object_).reshape(*lead, 1)} for t in items], 0
    if spec.token_inputs is None:
        raise APIError(400, f"model {model!r} embeds text only; send strings as input", "input")
    if spec.vocab_size is not None:
        bad = next((t for ids in items for t in ids if t >= spec.vocab_size), None)
        if bad is not None:
            raise APIError(
                400,
                f"token id {bad} is outside the vocabulary of model {model!r} (ids 0 to {spec.vocab_size - 1})",
                "input",
            )
    # pad one call's arrays to its longest: equal shapes let the batcher batch them; the mask drops padding
    width = max(len(ids) for ids in items)
    ids_name, mask_name = spec.token_inputs
    out = []
    for ids in items:
        padded = np.zeros((*lead, width), dtype=np.int64)
        mask = np.zeros((*lead, width), dtype=np.int64)
        padded[..., : len(ids)], mask[..., : len(ids)] = ids, 1
        out.append({ids_name: padded, mask_name: mask})
    return out, sum(len(ids) for ids in items)


def _vector(array: np.ndarray, dimensions: int) -> np.ndarray:
    v = np.asarray(array, dtype=np.float32).reshape(-1)
    if dimensions == v.size:
        return v
    v = v[:dimensions]  # Matryoshka: the leading dimensions, renormalized to unit length
    return v / max(float(np.linalg.norm(v)), 1e-12)


# No embedding model by that name is a 404, as OpenAI answers a model used on the wrong endpoint.
_WHY = {404: "No such model, or the model is not an embedding model (an LLM, a classifier)."}


@router.post("/v1/embeddings", responses=error_responses(400, 401, 404, 413, 429, 503, why=_WHY))
async def embeddings(body: EmbeddingRequest, request: Request):
    mv = routed(request, body.model, key=body.user, front_end=None)  # _spec answers a 404 for other kinds
    if mv.kind.serves(FrontEnd.POOLING):  # a decoder embedder on our engine (docs/pooling.md)
        vectors, tokens = await pooled_embeddings(request, mv, body.items(), body.dimensions)
        return response(mv.model, vectors, body.encoding_format, tokens)
    spec = _spec(request, mv)
    serving = TensorServing.of(mv)
    dimensions = _dimensions(body, spec, mv.model)
    inputs, tokens = _requests(body, spec, mv.model, serving.config.max_batch_size > 0)
    by_text = spec.text_input is not None and spec.text_input in inputs[0]
    asked = [(spec.output, {})] + ([(spec.mask_output, {})] if by_text and spec.mask_output else [])
    async with traced(request, "embed", len(inputs), mv) as usage:
        answers = await asyncio.gather(*(serving.infer(i, {}, asked) for i in inputs), return_exceptions=True)
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            raise failed  # every request has ended: nothing is left running
        if by_text and spec.mask_output:
            tokens = sum(int(np.asarray(a[spec.mask_output]).sum()) for a in answers)
        usage["tokens"] = tokens
    vectors = [_vector(a[spec.output], dimensions) for a in answers]
    return response(mv.model, vectors, body.encoding_format, tokens)
