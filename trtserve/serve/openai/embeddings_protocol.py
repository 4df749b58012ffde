"""/v1/embeddings: OpenAI's request body (unknown fields rejected) and what an embedding model's
config says about serving it (docs/tensor-models.md, "Embeddings")."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from trtserve.serve.json_body import JsonBody
from trtserve.tensor.types import TensorModelConfig

MAX_INPUTS = 2048  # OpenAI's limit on one call's inputs
_SHAPES = "a string, a list of strings, a list of token ids, or a list of token-id lists"


def _is_id(x: Any) -> bool:
    """A token id: a JSON integer (3 or 3.0, not true or "3") in [0, 2^31)."""
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**31


def _check_input(v: Any) -> Any:
    """One of OpenAI's four input shapes, non-empty; a sentence naming the problem otherwise."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not items:
        raise ValueError(f"give {_SHAPES}")
    if len(items) > MAX_INPUTS:
        raise ValueError(f"{len(items)} inputs; send at most {MAX_INPUTS} per call")
    if all(isinstance(x, str) for x in items):
        if any(not x for x in items):
            raise ValueError("an input string is empty; embed non-empty text")
    elif not all(_is_id(x) for x in items) and not all(
        isinstance(x, list) and x and all(_is_id(t) for t in x) for x in items
    ):
        raise ValueError(
            f"mixes or nests types, or holds an empty list or a token id outside [0, 2^31); give {_SHAPES}"
        )
    return v


_TOKEN_ID = {"type": "integer", "minimum": 0, "exclusiveMaximum": 2**31}
_INPUT_SCHEMA = WithJsonSchema(
    {
        "anyOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS, "items": {"type": "string", "minLength": 1}},
            {"type": "array", "minItems": 1, "items": _TOKEN_ID},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_INPUTS,
                "items": {"type": "array", "minItems": 1, "items": _TOKEN_ID},
            },
        ],
        "description": f"What to embed: {_SHAPES}.",
    }
)


class EmbeddingRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # the repository's default model when left out
    input: Annotated[str | list[str] | list[int] | list[list[int]], BeforeValidator(_check_input), _INPUT_SCHEMA]
    encoding_format: Literal["float", "base64"] = "float"  # base64: little-endian float32 bytes
    dimensions: int | None = Field(None, ge=1, lt=2**31)  # fewer dimensions, where the model allows it
    user: str | None = None  # routing stickiness, as on the other /v1 routes

    def items(self) -> list[str] | list[list[int]]:
        """The inputs, one entry each: texts, or token-id lists."""
        v = self.input
        if isinstance(v, str):
            return [v]
        if all(isinstance(x, int) for x in v):
            return [list(v)]
        return list(v)


@dataclass(frozen=True)
class EmbeddingSpec:
    """An embedding model as its config describes it."""

    output: str  # the FP32 output holding one vector per input
    size: int  # its length
    text_input: str | None  # the BYTES input texts go to; None: token arrays only
    token_inputs: tuple[str, str] | None  # (ids, mask) tensors token arrays go to; None: text only
    mask_output: str | None  # an output holding the attention mask: its sum is the usage's token count
    matryoshka: bool  # any `dimensions` up to `size` by truncation and renormalization
    vocab_size: int | None  # token ids must be below it, when given

    @classmethod
    def of(cls, config: TensorModelConfig) -> EmbeddingSpec | None:
        """None when the model is no embedding model: no single vector-shaped FP32 output, or no
        text input and no token inputs."""
        p = config.parameters
        vectors = [t for t in config.outputs if t.datatype == "FP32" and len(t.dims) == 1 and t.dims[0] > 0]
        out = (
            config.output(p["embedding_output"])
            if "embedding_output" in p
            else (vectors[0] if len(vectors) == 1 else None)
        )
        if out is None or out.datatype != "FP32" or len(out.dims) != 1 or out.dims[0] <= 0:
            return None
        texts = [t.name for t in config.inputs if t.datatype == "BYTES"]
        text_input = p.get("text_input") or (texts[0] if len(config.inputs) == 1 and texts else None)
        names = {t.name for t in config.inputs}
        tokens = tuple(n.strip() for n in p["token_inputs"].split(",")) if "token_inputs" in p else None
        if tokens is None and names == {"input_ids", "attention_mask"}:
            tokens = ("input_ids", "attention_mask")
        if tokens is not None and len(tokens) != 2:
            tokens = None
        if text_input is None and tokens is None:
            return None  # nothing to send text or token ids to (a classifier, say)
        mask = tokens[1] if tokens and config.output(tokens[1]) is not None else None
        vocab = p.get("vocab_size", "")
        return cls(
            output=out.name,
            size=out.dims[0],
            text_input=text_input,
            token_inputs=tokens,
            mask_output=mask,
            matryoshka=p.get("matryoshka", "").lower() == "true",
            vocab_size=int(vocab) if vocab.isdigit() else None,
        )


def encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


def response(model: str, vectors: list[np.ndarray], encoding_format: str, tokens: int) -> dict:
    data = [{"object": "embedding", "index": i, "embedding": encode(v, encoding_format)} for i, v in enumerate(vectors)]
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
