"""One layer's attention over the paged KV cache, for every row of a flat batch (models/batch.py).

On CPU a layer's rows run on the kernels over the cache in place (kernels/attention.py): decode rows on the
decode kernel, prompt rows (whole prompts, chunks after cached keys, speculation's verification rows) on the
prompt kernel, each within the layer's window (ModelConfig.window: Gemma's local layers, Mistral's every layer),
with the soft-cap and sinks below. Elsewhere, and for rows that attend both ways (Gemma 3's images), torch runs
each group with its mask for that window. Soft-capped scores (Gemma 2) run as HF's eager attention does: scores
scaled, capped, masked, softmax in float32; attention sinks (gpt-oss) as its eager attention does too: each
head's sink logit joins the softmax, and its share is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from trtserve.kernels import attention
from trtserve.models import deterministic as det
from trtserve.models.batch import AttnGroup, FlatBatch
from trtserve.models.kv_cache import PagedKVCache


@dataclass(frozen=True)
class LayerAttention:
    """What one layer's attention computes."""

    heads: int
    kv_heads: int
    head_size: int
    scale: float  # the scores' factor (head_size ** -0.5 unless the config sets one)
    window: int | None  # keys within this many positions of the query; None: every key up to it
    softcap: float | None  # scores become softcap * tanh(scores / softcap); None: left as they are
    deterministic: bool  # batch-invariant tiles (models/deterministic.py)
    sinks: torch.Tensor | None = None  # (heads,): a logit per head joining each softmax's denominator (gpt-oss)
    # the sinks as the decode kernel reads them (float32), converted once rather than every layer of every step
    sinks_f32: torch.Tensor | None = field(init=False, default=None, repr=False)

    def __post_init__(self):
        if self.sinks is not None:
            object.__setattr__(self, "sinks_f32", self.sinks.float().contiguous())

    def __call__(self, layer: int, q: torch.Tensor, batch: FlatBatch, kv: PagedKVCache) -> torch.Tensor:
        """Attention of q (T, heads, head_size) over the layer's cached keys; returns (T, heads * head_size)."""
        if self.deterministic:
            bs = kv.tokens_per_block
            pos = torch.arange(batch.block_tables.shape[1] * bs, device=q.device)
            kv_slots = batch.block_tables[:, pos // bs] * bs + pos % bs  # (B, max_blocks * bs)
            keys, values = kv.layer_keys(layer), kv.layer_values(layer)
            return det.attention(
                q, keys, values, kv_slots[batch.seq_ids], batch.positions, self.scale, self.window, self.softcap,
                self.sinks,
            )  # fmt: skip
        out = None
        stored = kv.stored_keys(layer), kv.stored_values(layer)  # None for an 8-bit cache
        in_place = stored[0] is not None and attention.usable(q, stored[0])
        causal_only = kv.kv_quant is None and self.window is None and self.softcap is None and self.sinks is None
        for g in batch.groups:
            if in_place and g.q_index.shape[1] > 1 and not g.two_way:  # prompt rows, keys read where they lie
                out = q.new_empty(q.shape[0], self.heads * self.head_size) if out is None else out
                if attention.prompt_attention(
                    q, *stored, g.block_tables, g.kv_lens, g.q_start, g.q_lens, kv.tokens_per_block, self.scale, out,
                    self.window, self.softcap, self.sinks_f32,
                ):  # fmt: skip
                    continue
            if g.fresh and causal_only:
                out = q.new_empty(q.shape[0], self.heads * self.head_size) if out is None else out
                self._fresh(layer, q, g.fresh, batch.slot_mapping, kv, out)
                continue
            if g.q_index.shape[1] == 1 and in_place:  # decode rows: keys and values read where they lie
                out = q.new_empty(q.shape[0], self.heads * self.head_size) if out is None else out
                bs = kv.tokens_per_block
                if attention.decode_attention(
                    q, *stored, g.block_tables, g.kv_lens, g.q_index[:, 0], bs, self.scale, out, self.window,
                    self.softcap, self.sinks_f32,
                ):  # fmt: skip
                    if g.scatter is None:
                        return out  # the whole batch, in order
                    continue
            o = self._group(layer, q, g, kv)
            if g.scatter is None:
                return o  # the whole batch, in order
            rows, targets = g.scatter
            out = q.new_empty(q.shape[0], self.heads * self.head_size) if out is None else out
            out.index_copy_(0, targets, o.index_select(0, rows))
        return out  # (T, n_h * hd)

    def _fresh(
        self, layer: int, q: torch.Tensor, spans: tuple[tuple[int, int], ...], slots: torch.Tensor, kv: PagedKVCache,
        out: torch.Tensor,
    ) -> None:  # fmt: skip
        """Sequences with no cached keys, each as one causal call on its own rows (no mask, no padding, no
        whole-block gather: the flash kernel skips the masked half): out[start:start + n]."""
        # every row's key and value in one gather (T, n_kv, hd): the batch's rows are mostly these sequences'
        keys, values = kv.slots_kv(layer, slots)
        for start, n in spans:
            k, v = (t[start : start + n].transpose(0, 1).unsqueeze(0) for t in (keys, values))
            qs = q[start : start + n].transpose(0, 1).unsqueeze(0)  # (1, heads, n, hd)
            o = F.scaled_dot_product_attention(qs, k, v, is_causal=True, scale=self.scale, enable_gqa=True)
            out[start : start + n].view(n, self.heads, -1).copy_(o[0].transpose(0, 1))

    def _group(self, layer: int, q: torch.Tensor, g: AttnGroup, kv: PagedKVCache) -> torch.Tensor:
        """One group's padded attention: (G * max_q, heads * head_size), row by (sequence, query row)."""
        n_h, n_kv, hd = self.heads, self.kv_heads, self.head_size
        group = n_h // n_kv
        n_g, max_q = g.q_index.shape
        # Whole blocks, copied once (and dequantized if the cache is 8-bit): (G, keys, n_kv, hd)
        # -> viewed as (G, n_kv, keys, hd)
        keys, values = kv.gather_blocks(layer, g.block_tables.flatten())
        keys = keys.view(n_g, -1, n_kv, hd).transpose(1, 2)
        values = values.view(n_g, -1, n_kv, hd).transpose(1, 2)
        qg = q[g.q_index].view(n_g, max_q, n_kv, group, hd)  # (G, max_q, n_kv, group, hd)
        qg = qg.permute(0, 2, 3, 1, 4).reshape(n_g, n_kv, group * max_q, hd)
        mask = g.attn_mask(self.window)  # (G, 1, group * max_q, keys)
        if self.sinks is not None:  # each row's head's sink: rows run (n_kv, group, max_q)
            sinks = self.sinks.view(1, n_kv, group, 1, 1).expand(1, n_kv, group, max_q, 1).reshape(1, n_kv, -1, 1)
            o = eager(qg, keys, values, mask, self.scale, self.softcap, sinks)
        elif self.softcap is None:
            o = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask, scale=self.scale)
        else:
            o = eager(qg, keys, values, mask, self.scale, self.softcap)
        return o.view(n_g, n_kv, group, max_q, hd).permute(0, 3, 1, 2, 4).reshape(n_g * max_q, n_h * hd)


def eager(
    q: torch.Tensor,  # (G, n_kv, rows, hd)
    keys: torch.Tensor,  # (G, n_kv, keys, hd)
    values: torch.Tensor,  # (G, n_kv, keys, hd)
    mask: torch.Tensor,  # (G, 1, rows, keys) bool: True = attend
    scale: float,
    cap: float | None,
    sinks: torch.Tensor | None = None,  # (1, n_kv, rows, 1): each row's sink logit
) -> torch.Tensor:
    """HF's eager attention with soft-capped scores (Gemma 2) or sinks (gpt-oss): (G, n_kv, rows, hd)."""
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale  # (G, n_kv, rows, keys)
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is None:
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), values)
    scores = torch.cat([scores, sinks.to(scores.dtype).expand(*scores.shape[:-1], 1)], dim=-1)
    probs = torch.softmax(scores - scores.amax(dim=-1, keepdim=True), dim=-1)[..., :-1]  # in q's dtype, as HF's
    return torch.matmul(probs, values)
