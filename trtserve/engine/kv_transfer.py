"""Disaggregated prefill/decode: the typed hand-off of a prompt's KV from one engine to another.

A prefill engine runs a request that carries `KVHold`: it computes the prompt, samples the first
token, and instead of freeing the prompt's KV blocks it holds them; the finishing TokenDelta carries a
`KVHandle` naming them. `Engine.export_kv(handle)` copies them out as a `KVPayload` (raw bytes, bit for
bit as stored), `Engine.release_kv(handle)` frees them (and the engine frees them by itself once
`hold_s` has passed). A decode engine runs a request that carries `KVImport`: its prompt's KV is
written from the payload, the first token is taken as already generated, and decoding goes on from
there, exactly as if the same engine had computed the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.engine.ids import RequestId

DEFAULT_HOLD_S = 30.0


@dataclass(frozen=True, slots=True)
class KVHold:
    """RequestOptions.kv_transfer of a prefill request: keep its prompt's KV once it finishes."""

    hold_s: float = DEFAULT_HOLD_S  # seconds the blocks are kept if nobody releases them


@dataclass(frozen=True, slots=True)
class KVHandle:
    """The held KV of one finished prefill request (TokenDelta.kv_handle)."""

    request_id: RequestId  # the prefill request that holds the blocks
    num_tokens: int  # prompt tokens whose K and V the blocks hold
    first_token: int  # the token the prefill sampled after them


@dataclass(frozen=True)
class KVPayload:
    """A prompt's KV blocks as the engine stores them (8-bit caches stay 8-bit)."""

    fingerprint: str | None  # the engine it came from (engine/manifest.py): only the same engine may import it
    num_tokens: int  # tokens held; the last block may be partly filled
    shape: tuple[int, ...]  # (blocks, layers, 2 [K, V], tokens_per_block, kv_heads, head_dim)
    dtype: str  # the storage dtype's torch name, e.g. "float32"
    data: memoryview | bytes  # the blocks' bytes, C order

    @property
    def nbytes(self) -> int:
        return len(self.data) if isinstance(self.data, bytes) else self.data.nbytes


@dataclass(frozen=True)
class KVImport:
    """RequestOptions.kv_transfer of a decode request: its prompt's KV and first token, computed elsewhere."""

    payload: KVPayload  # payload.num_tokens must equal the request's prompt length
    first_token: int  # the prefill's sampled token: the request's first output token


KVTransfer = KVHold | KVImport
