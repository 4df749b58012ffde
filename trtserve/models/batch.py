"""The forward pass's input: a flat, unpadded batch of tokens over a paged KV cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SeqChunk:
    """One sequence's slice of a step: `tokens` at positions [start, start + len(tokens))."""

    tokens: Sequence[int]  # new token ids to run this step
    start: int  # tokens already in the KV cache (num_computed_tokens)
    block_table: Sequence[int]  # KV block ids covering positions [0, start + len(tokens))


@dataclass(frozen=True)
class FlatBatch:
    token_ids: torch.Tensor  # (T,) int64, sequences back to back
    positions: torch.Tensor  # (T,) int64
    slot_mapping: torch.Tensor  # (T,) int64: cache slot (block * tokens_per_block + offset) of each token
    q_index: torch.Tensor  # (B, max_q) int64: flat token index per (sequence, query row); pad -> 0
    q_valid: torch.Tensor  # (B, max_q) bool: real query rows
    kv_slots: torch.Tensor  # (B, max_kv) int64: cache slot of each context position; pad -> 0
    attn_mask: torch.Tensor  # (B, 1, max_q, max_kv) bool: True = query may attend to key
    logits_indices: torch.Tensor  # (N,) int64: flat indices of the tokens whose logits are wanted
    seq_ids: torch.Tensor  # (T,) int64: the sequence (row of q_index/kv_slots) each token belongs to


def make_batch(
    seqs: Sequence[SeqChunk],
    tokens_per_block: int,
    sliding_window: int | None = None,
    device: torch.device | None = None,
    logit_rows: Sequence[Sequence[int]] | None = None,
) -> FlatBatch:
    """Lay out a step. logit_rows: per sequence, offsets within its chunk whose logits are wanted
    (default: its last token)."""
    n_b = len(seqs)
    q_lens = torch.tensor([len(s.tokens) for s in seqs])  # (B,)
    starts = torch.tensor([s.start for s in seqs])  # (B,)
    kv_lens = starts + q_lens  # (B,)
    max_q, max_kv = int(q_lens.max()), int(kv_lens.max())

    kv_slots = torch.zeros(n_b, max_kv, dtype=torch.long)
    slot_chunks, pos_chunks = [], []
    for b, s in enumerate(seqs):
        ctx = int(kv_lens[b])
        pos = torch.arange(ctx)
        table = torch.as_tensor(s.block_table, dtype=torch.long)
        if table.numel() * tokens_per_block < ctx:
            raise ValueError(f"block table of {table.numel()} blocks cannot hold {ctx} tokens")
        slots = table[pos // tokens_per_block] * tokens_per_block + pos % tokens_per_block  # (ctx,)
        kv_slots[b, :ctx] = slots
        slot_chunks.append(slots[s.start :])
        pos_chunks.append(pos[s.start :])

    offsets = torch.cumsum(q_lens, 0) - q_lens  # (B,) first flat index of each sequence
    rows = torch.arange(max_q)  # (max_q,)
    q_valid = rows[None, :] < q_lens[:, None]  # (B, max_q)
    q_index = torch.where(q_valid, offsets[:, None] + rows[None, :], 0)
    q_pos = starts[:, None] + rows[None, :]  # (B, max_q)
    k_pos = torch.arange(max_kv)  # (max_kv,)
    mask = (k_pos[None, None, :] <= q_pos[:, :, None]) & (k_pos[None, None, :] < kv_lens[:, None, None])
    if sliding_window is not None:
        mask &= (q_pos[:, :, None] - k_pos[None, None, :]) < sliding_window
    # Padded query rows attend to key 0 only, so softmax never sees an all-masked row.
    mask |= (~q_valid)[:, :, None] & (k_pos == 0)[None, None, :]

    to = dict(device=device)
    return FlatBatch(
        token_ids=torch.tensor([t for s in seqs for t in s.tokens], dtype=torch.long, **to),
        positions=torch.cat(pos_chunks).to(**to),
        slot_mapping=torch.cat(slot_chunks).to(**to),
        q_index=q_index.to(**to),
        q_valid=q_valid.to(**to),
        kv_slots=kv_slots.to(**to),
        attn_mask=mask[:, None].to(**to),
        logits_indices=_logits_indices(offsets, q_lens, logit_rows).to(**to),
        seq_ids=torch.repeat_interleave(torch.arange(n_b), q_lens).to(**to),
    )


def _logits_indices(
    offsets: torch.Tensor, q_lens: torch.Tensor, logit_rows: Sequence[Sequence[int]] | None
) -> torch.Tensor:
    if logit_rows is None:
        return offsets + q_lens - 1
    flat = [int(offsets[b]) + r for b, rows in enumerate(logit_rows) for r in rows]
    return torch.tensor(flat, dtype=torch.long)
