"""The torch engine's side of disaggregation (engine/kv_transfer.py) and of its KV events' export.

`KVHolds` keeps the blocks of finished KVHold requests under their sequence in the block manager
(so they stay referenced, and the LRU cannot evict them) until released or expired. `export_blocks`
and `import_blocks` move a prompt's blocks as raw bytes through PagedKVCache.read_blocks /
write_blocks, bit for bit. `contract_listener` turns the block manager's events into the contract's.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import torch

from trtserve.engine.errors import UserError
from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.kv_cache_events import KVCacheEvent, KVCacheListener, PrefixCleared, PrefixRemoved, PrefixStored
from trtserve.engine.kv_transfer import KVHandle, KVImport, KVPayload
from trtserve.models.kv_cache import PagedKVCache
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.kv_events import BlockRemoved, BlockStored, KVEvent, KVListener


@dataclass
class _Held:
    seq: SequenceId  # the block manager's key of the held table
    num_tokens: int
    deadline: float  # time.monotonic() after which the blocks are freed unasked


class KVHolds:
    """The prompt KV of finished prefill requests, held for a decode engine to copy out."""

    def __init__(self, blocks: BlockManager):
        self.blocks = blocks
        self._held: dict[RequestId, _Held] = {}

    def hold(self, seq: SequenceId, num_tokens: int, hold_s: float) -> None:
        """The finished sequence's table stays allocated (the scheduler did not free it)."""
        self._held[seq.request] = _Held(seq, num_tokens, time.monotonic() + hold_s)

    def release(self, request_id: RequestId) -> bool:
        held = self._held.pop(request_id, None)
        if held is not None:
            self.blocks.free(held.seq)
        return held is not None

    def expire(self, now: float | None = None) -> int:
        """Free the holds nobody released in time; returns how many."""
        now = time.monotonic() if now is None else now
        late = [rid for rid, h in self._held.items() if h.deadline <= now]
        for rid in late:
            self.release(rid)
        return len(late)

    def release_all(self) -> None:
        for rid in list(self._held):
            self.release(rid)

    def __len__(self) -> int:
        return len(self._held)

    def export(self, kv: PagedKVCache, handle: KVHandle, fingerprint: str | None) -> KVPayload:
        held = self._held.get(handle.request_id)
        if held is None:
            raise UserError(
                f"the KV of {handle.request_id} is no longer held (released, or not pulled within its hold time)"
            )
        table = self.blocks.block_table(held.seq)[: self.blocks.blocks_for(held.num_tokens)]
        data = kv.read_blocks(table)  # (blocks, layers, 2, tokens_per_block, kv_heads, head_dim)
        raw = data.view(torch.uint8).numpy()  # the storage bytes, whatever the dtype (bfloat16 included)
        return KVPayload(fingerprint, held.num_tokens, tuple(data.shape), _dtype_name(data.dtype), memoryview(raw))


def check_import(kv: PagedKVCache, kv_import: KVImport, prompt_len: int, fingerprint: str | None) -> None:
    """UserError unless this engine can continue from the payload."""
    p = kv_import.payload
    if p.fingerprint != fingerprint:
        raise UserError(
            "the imported KV comes from another engine (fingerprint differs); "
            "run prefill and decode workers on the same engine dir"
        )
    if p.num_tokens != prompt_len:
        raise UserError(f"the imported KV holds {p.num_tokens} tokens but the prompt has {prompt_len}")
    blocks = -(-p.num_tokens // kv.tokens_per_block)
    expected = (blocks, *kv.data.shape[:2], kv.tokens_per_block, *kv.data.shape[-2:])
    if tuple(p.shape) != expected or p.dtype != _dtype_name(kv.data.dtype):
        raise UserError(f"the imported KV is {tuple(p.shape)} {p.dtype}; this engine stores {expected} {kv.data.dtype}")


def import_blocks(kv: PagedKVCache, block_ids: list[int], payload: KVPayload) -> None:
    """Write the payload's blocks into block_ids (the head of a freshly allocated table)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only buffer: write_blocks copies out of it
        raw = torch.frombuffer(payload.data, dtype=torch.uint8)
    data = raw.view(getattr(torch, payload.dtype)).view(payload.shape)
    kv.write_blocks(block_ids[: payload.shape[0]], data)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def contract_listener(listener: KVCacheListener) -> KVListener:
    """The block manager's listener that hands `listener` the contract's events."""

    def convert(event: KVEvent) -> None:
        listener(to_contract(event))

    return convert


def to_contract(event: KVEvent) -> KVCacheEvent:
    if isinstance(event, BlockStored):
        s = event.scope
        return PrefixStored(event.key, event.parent, event.token_ids, event.block, s.namespace, s.version, s.adapter)
    if isinstance(event, BlockRemoved):
        return PrefixRemoved(event.key, event.block, event.evicted)
    return PrefixCleared()
