"""A receipt: what one generation was computed from and what it produced, enough to replay it.

Stored as JSON (the `Receipt` model below is its schema); `GET /v1/receipts/{id}` returns it and
`trtserve replay RECEIPT.json` reads it back.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from trtserve.engine.options import EngineOptions
from trtserve.text.outputs import RequestMetrics

RECEIPT_HEADER = "X-Trtserve-Receipt"
# 2: the engine options under engine.options (1 kept them as engine fields; still read)
# 3: the run's per-request timings under `metrics`, its images' content hashes under `images` (2 had neither;
# still read)
FORMAT_VERSION = 3


def receipt_field(runs) -> str | list[str]:
    """A response's `receipt` field: the id of its one generation, or one per prompt, in order."""
    ids = [r.receipt_id for r in runs]
    return ids[0] if len(ids) == 1 else ids


def token_sha256(token_ids: list[int]) -> str:
    """sha256 of the token ids as little-endian int32s: a client can recompute it from the ids."""
    return hashlib.sha256(struct.pack(f"<{len(token_ids)}i", *token_ids)).hexdigest()


class EngineIdentity(BaseModel):
    """What computed the answer. A replay on another fingerprint is refused unless asked for."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: str | None  # the engine manifest's hash (engine/manifest.py: engine_fingerprint); None: unknown
    backend: str  # the manifest's backend: torch | tensorrt | trtllm
    platform: str  # what ran it: trtserve_torch | tensorrt_llm
    backend_version: str  # trtserve's version for torch; TensorRT-LLM's for the tensorrt_llm backends
    trtserve_version: str
    # The engine options that change the numbers, where set away from their defaults
    # (EngineOptions.identity()): a replay runs with the same ones.
    options: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _options_from_fields(cls, data: Any) -> Any:
        """Receipts written before `options` kept the engine options of then as fields of their own."""
        fields = EngineOptions.model_fields
        if not isinstance(data, dict) or not any(k in fields for k in data):
            return data
        options = dict(data.get("options") or {})
        for name in [k for k in data if k in fields]:
            value = data[name]
            if value is not None and value != fields[name].default:
                options[name] = value
        return {k: v for k, v in data.items() if k not in fields} | {"options": options}

    @property
    def deterministic(self) -> bool:
        """Batch-invariant kernels: a replay must then be identical bit for bit."""
        return self.options.get("deterministic", False) is True


class AdapterRecord(BaseModel):
    """The LoRA adapter a generation ran under: a replay needs the same contents under that name."""

    model_config = ConfigDict(extra="forbid")

    name: str  # the name it was selected by (the request's model)
    content_hash: str  # "sha256:..." of its files (AdapterRef.content_hash)


class SequenceRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int  # which of the request's n sequences
    token_ids: list[int]
    sha256: str  # token_sha256(token_ids)
    logprobs: list[float] | None  # of each sampled token (recorded for replay reports)
    finish_reason: str | None
    stop_reason: int | str | None = None


class CacheRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: str | None  # cache_namespace
    context_version: int | None
    salted: bool  # a cache_salt was given (the salt itself is not stored)
    cached_tokens: int  # prompt tokens served by the prefix cache
    preemptions: int = 0  # times the engine preempted it and recomputed its KV cache


class Timings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue_s: float | None  # arrival to first scheduling, in the engine
    ttft_s: float | None  # admission to first token
    e2e_s: float  # admission to the end


class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: int = FORMAT_VERSION
    id: str
    created_at: float  # unix seconds when the request was admitted
    mode: Literal["on", "hashes"]  # hashes: the prompt's token ids are not stored, only their sha256
    model: str  # the repository model (a LoRA adapter's base; the adapter is `adapter`)
    model_version: str | None
    engine: EngineIdentity
    adapter: AdapterRecord | None = None  # None: the base model
    protocol: str  # http | grpc (the front end's transport)
    client_id: str | None  # what the client called the request (echoed ids), never a key
    params: dict  # the full SamplingParams, including the seed used
    prompt_token_ids: list[int] | None  # None in `hashes` mode
    prompt_sha256: str
    num_prompt_tokens: int
    # the prompt's images in order, by content hash (ImageInput.content_hash), never their bytes: docs/receipts.md
    images: list[str] = []
    outputs: list[SequenceRecord]
    cache: CacheRecord
    timings: Timings
    # what `return_metrics` answers for the run (serve/telemetry/timings.py); None in receipts before 3
    metrics: RequestMetrics | None = None
    ok: bool  # finished without error, deadline or disconnect
    error: str | None = None
