"""/v1/embeddings: OpenAI's request body (unknown fields rejected) and its response."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from trtserve.serve.json_body import JsonBody

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
