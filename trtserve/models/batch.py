"""The forward pass's input: a flat, unpadded batch of tokens over a paged KV cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial

import torch


@dataclass(frozen=True)
class SeqChunk:
    """One sequence's slice of a step: `tokens` at positions [start, start + len(tokens))."""

    tokens: Sequence[int]  # new token ids to run this step
    start: int  # tokens already in the KV cache (num_computed_tokens)
    block_table: Sequence[int]  # KV block ids covering positions [0, start + len(tokens))
    # the rows that continue a decode: its last token and the proposals after it that speculative decoding
    # verifies (or a draft model's catch-up); a step whose chunks are all such rows runs as a decode step
    decode_rows: int = 1
    prompt_len: int = 0  # its request's prompt tokens (LongRoPE picks factors by it, models/rope.py); 0: unknown
    # [start, end) positions whose rows attend to each other both ways (Gemma 3's images; each within this chunk)
    bidirectional: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class AttnGroup:
    """Sequences of similar length whose attention runs as one padded call.

    Query heads are folded per KV head (GQA): row r of a sequence's folded queries is query
    head (kv * group + r // max_q) at query row (r % max_q).
    """

    q_index: torch.Tensor  # (G, max_q) int64: flat token index per (sequence, query row); pad -> 0
    q_valid: torch.Tensor  # (G, max_q) bool: real query rows
    block_tables: torch.Tensor  # (G, n_blocks) int64: KV blocks covering each sequence's keys; pad -> 0
    kv_lens: torch.Tensor  # (G,) int64: keys of each sequence after this step (cached + new tokens)
    # by attention window (None: every key up to the query): (G, 1, gqa_group * max_q, n_blocks *
    # tokens_per_block) bool, True = attend; those make_batch was given, and any attn_mask built since
    attn_masks: dict[int | None, torch.Tensor]
    build_mask: Callable[[int | None], torch.Tensor]  # one window's mask, as attn_masks holds it
    # Where the G * max_q output rows go: (rows of them that are real, their flat token indices);
    # None when every row is real and row r is flat token r (one group of the whole batch in order).
    scatter: tuple[torch.Tensor, torch.Tensor] | None
    # (flat offset, rows) of each sequence when none has cached keys: each attends causally to its own new rows
    # only, so attention may run without the mask; a batch masked otherwise (tokens attending both ways) leaves it empty
    fresh: tuple[tuple[int, int], ...] = ()
    # each sequence's first flat row and its rows (G,) int64, where its rows are consecutive (they are); the
    # prompt attention kernel reads these instead of a mask
    q_start: torch.Tensor | None = None
    q_lens: torch.Tensor | None = None
    two_way: bool = False  # some rows attend both ways (Gemma 3's images): only the mask says which

    def attn_mask(self, window: int | None = None) -> torch.Tensor:
        """The mask of the layers attending within `window` keys (None: every key up to the query)."""
        if window not in self.attn_masks:
            self.attn_masks[window] = self.build_mask(window)
        return self.attn_masks[window]


@dataclass(frozen=True)
class FlatBatch:
    token_ids: torch.Tensor  # (T,) int64, sequences back to back
    positions: torch.Tensor  # (T,) int64
    slot_mapping: torch.Tensor  # (T,) int64: cache slot (block * tokens_per_block + offset) of each token
    # builds the attention groups (every sequence in exactly one) on first use of `groups`: the one-call
    # decode step reads none of them
    layout: Callable[[], list[AttnGroup]]
    block_tables: torch.Tensor  # (B, max_blocks) int64: each sequence's KV blocks; pad -> 0
    logits_indices: torch.Tensor  # (N,) int64: flat indices of the tokens whose logits are wanted
    seq_ids: torch.Tensor  # (T,) int64: the sequence (row of block_tables) each token belongs to
    decoding: bool = False  # every sequence runs decode rows only (SeqChunk.decode_rows)
    prompt_lens: torch.Tensor | None = None  # (T,) int64: each token's SeqChunk.prompt_len; None: none known
    # image rows (runtime/features/vision.py): (R,) int64 flat token indices, (R, hidden) the embeddings that
    # replace their tokens'; None: every row embeds its token
    embeds: tuple[torch.Tensor, torch.Tensor] | None = None

    @cached_property
    def groups(self) -> list[AttnGroup]:
        return self.layout()


def make_batch(
    seqs: Sequence[SeqChunk],
    tokens_per_block: int,
    device: torch.device | None = None,
    logit_rows: Sequence[Sequence[int]] | None = None,
    gqa_group: int = 1,
) -> FlatBatch:
    """Lay out a step. logit_rows: per sequence, offsets within its chunk whose logits are wanted (default: its last
    token). gqa_group: query heads per KV head. Attention masks are built by the layers that ask (AttnGroup.attn_mask),
    one per window: the CPU kernels read positions instead."""
    n_b = len(seqs)
    # Python lists, one tensor each at the end: per-sequence tensor ops cost ~10 us apiece, which at decode
    # sizes outweighed the step's own work (docs/performance.md, "Laying out a step")
    q_list = [len(s.tokens) for s in seqs]
    start_list = [s.start for s in seqs]
    kv_list = [st + q for st, q in zip(start_list, q_list, strict=True)]
    blocks_list = [-(-kv // tokens_per_block) for kv in kv_list]
    width = max(blocks_list)
    table_rows, slots, positions = [], [], []
    for s, ctx, n_blk in zip(seqs, kv_list, blocks_list, strict=True):
        if len(s.block_table) * tokens_per_block < ctx:
            raise ValueError(f"block table of {len(s.block_table)} blocks cannot hold {ctx} tokens")
        table = [int(b) for b in s.block_table[:n_blk]]
        table_rows.append(table + [0] * (width - n_blk))
        positions.extend(range(s.start, ctx))  # only the new tokens' slots are needed here
        slots.extend(
            table[p // tokens_per_block] * tokens_per_block + p % tokens_per_block for p in range(s.start, ctx)
        )
    offset_list = [0] * n_b
    for i in range(1, n_b):
        offset_list[i] = offset_list[i - 1] + q_list[i - 1]
    if logit_rows is None:
        logits = [o + q - 1 for o, q in zip(offset_list, q_list, strict=True)]
    else:
        logits = [o + r for o, rows in zip(offset_list, logit_rows, strict=True) for r in rows]
    seq_ids = [b for b, q in enumerate(q_list) for _ in range(q)]
    prompt_lens = [s.prompt_len for s, q in zip(seqs, q_list, strict=True) for _ in range(q)]
    # every per-token list in one tensor (one copy to the device), handed out as views
    parts = [[t for s in seqs for t in s.tokens], positions, slots, logits, seq_ids]
    if any(prompt_lens):
        parts.append(prompt_lens)
    flat = torch.tensor([x for part in parts for x in part], dtype=torch.long).to(device=device)
    views = torch.split(flat, [len(part) for part in parts])
    tables = torch.tensor(table_rows, dtype=torch.long)
    spans = [s.bidirectional for s in seqs]

    def layout() -> list[AttnGroup]:  # sequences without cached keys apart: their groups run unmasked
        q_lens, starts, kv_lens, offsets = (torch.tensor(x) for x in (q_list, start_list, kv_list, offset_list))
        return [
            _group(idx, q_lens, starts, kv_lens, offsets, tables, tokens_per_block, gqa_group, device, spans)
            for fresh in (True, False)
            for idx in _group_by_length(q_list, kv_list, [b for b in range(n_b) if (start_list[b] == 0) == fresh])
        ]

    return FlatBatch(
        token_ids=views[0],
        positions=views[1],
        slot_mapping=views[2],
        layout=layout,
        block_tables=tables.to(device=device),
        logits_indices=views[3],
        seq_ids=views[4],
        decoding=all(len(s.tokens) <= s.decode_rows for s in seqs),
        prompt_lens=views[5] if len(views) > 5 else None,
    )


def _group_by_length(q_lens: list[int], kv_lens: list[int], among: list[int]) -> list[list[int]]:
    """Split the sequences `among` into groups whose padding (to the group's longest query and key run)
    wastes at most about a third of the work; longest first."""
    if not among:
        return []
    order = sorted(among, key=lambda b: (-kv_lens[b], -q_lens[b]))
    groups: list[list[int]] = []
    cur: list[int] = []
    useful = longest_q = 0
    for b in order:
        work = q_lens[b] * kv_lens[b]
        if cur:
            padded = (len(cur) + 1) * max(longest_q, q_lens[b]) * kv_lens[cur[0]]
            if padded > 1.5 * (useful + work) + 4096:
                groups.append(cur)
                cur, useful, longest_q = [], 0, 0
        cur.append(b)
        useful += work
        longest_q = max(longest_q, q_lens[b])
    return groups + [cur]


def _group(idx, q_lens, starts, kv_lens, offsets, tables, block, gqa_group, device, spans) -> AttnGroup:
    sel = torch.tensor(idx)
    ql, st, kl, off = q_lens[sel], starts[sel], kv_lens[sel], offsets[sel]
    max_q = int(ql.max())
    n_blk = -(-int(kl.max()) // block)
    rows = torch.arange(max_q)
    q_valid = rows[None, :] < ql[:, None]  # (G, max_q)
    q_index = torch.where(q_valid, off[:, None] + rows[None, :], 0)
    q_pos = st[:, None] + rows[None, :]  # (G, max_q)
    k_pos = torch.arange(n_blk * block)
    causal = (k_pos[None, None, :] <= q_pos[:, :, None]) & (k_pos[None, None, :] < kl[:, None, None])
    both = _both_ways([spans[i] for i in idx], q_pos, k_pos)
    if both is not None:  # HF's OR(causal, same image); a window still applies (_mask)
        causal = causal | both
    # Padded query rows attend to key 0 only, so softmax never sees an all-masked row.
    pad = (~q_valid)[:, :, None] & (k_pos == 0)[None, None, :]
    to = dict(device=device)
    build = partial(_mask, causal, pad, q_pos, k_pos, gqa_group, device)
    rows_valid = q_valid.flatten().nonzero().squeeze(1)  # (real rows,)
    targets = q_index.flatten()[rows_valid]
    in_order = bool(q_valid.all()) and torch.equal(targets, torch.arange(int(q_lens.sum())))
    fresh = tuple(zip(off.tolist(), ql.tolist(), strict=True)) if not st.any() and both is None else ()
    return AttnGroup(
        q_index=q_index.to(**to),
        q_valid=q_valid.to(**to),
        scatter=None if in_order else (rows_valid.to(**to), targets.to(**to)),
        block_tables=tables[sel, :n_blk].to(**to),
        kv_lens=kl.to(**to),
        attn_masks={},  # built when a layer's attention asks (the kernels need none)
        build_mask=build,
        fresh=fresh,
        q_start=off.to(**to),
        q_lens=ql.to(**to),
        two_way=both is not None,
    )


def _both_ways(spans: list[tuple[tuple[int, int], ...]], q_pos: torch.Tensor, k_pos: torch.Tensor):
    """(G, max_q, keys) bool: query and key in one of the sequence's two-way spans; None: no span."""
    if not any(spans):
        return None
    out = torch.zeros(q_pos.shape[0], q_pos.shape[1], k_pos.shape[0], dtype=torch.bool)
    for g, seq_spans in enumerate(spans):
        for s, e in seq_spans:
            out[g] |= ((q_pos[g] >= s) & (q_pos[g] < e))[:, None] & ((k_pos >= s) & (k_pos < e))[None, :]
    return out


def _mask(causal, pad, q_pos, k_pos, gqa_group: int, device, window: int | None) -> torch.Tensor:
    """(G, 1, gqa_group * max_q, keys): causal (G, max_q, keys) within the window (a query at q_pos sees the
    keys fewer than `window` positions behind it: HF's kv_idx > q_idx - window), padded rows on key 0."""
    mask = causal if window is None else causal & ((q_pos[:, :, None] - k_pos[None, None, :]) < window)
    return (mask | pad).repeat(1, gqa_group, 1)[:, None].to(device=device)
