"""Batch-invariant kernels for `deterministic: true`.

A token's result must not depend on what else is in the step: the batch composition, the prefill
chunk size, or how much of its prompt came from the prefix cache. Two things break that in the
fast path: GEMM and reduction kernels pick different algorithms (and summation orders) for
different row counts, and attention reduces over a key length padded to the batch's longest
sequence. Here every op runs on fixed tiles of TILE rows, and attention walks the keys in fixed
blocks of absolute positions with an online softmax, where a fully masked block is an exact
no-op (scale exp(0) = 1, additions of 0). So each token sees the same shapes and the same
summation order whatever its neighbours.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from trtserve.kernels import dense

TILE = 16  # rows per kernel call
KEY_BLOCK = 16  # keys per attention step (absolute positions [j, j + KEY_BLOCK))


def tiled(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Apply fn to x (T, ...) in tiles of exactly TILE rows (the last one zero-padded)."""
    n = x.shape[0]
    pad = -n % TILE
    if pad:
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
    return torch.cat([fn(t) for t in x.split(TILE)])[:n]


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    # Our kernel where it takes a tile: a row's sum does not depend on the tile's other rows there, while
    # MKL's AVX2 sgemm sums a row by its place in the tile (seen under TRTSERVE_ISA=avx2)
    return tiled(lambda t: dense.linear(t, w, b), x)


def attention(
    q: torch.Tensor,  # (T, n_h, hd)
    keys: torch.Tensor,  # (slots, n_kv, hd): one layer's K cache
    values: torch.Tensor,  # (slots, n_kv, hd)
    kv_slots: torch.Tensor,  # (T, max_kv): each token's sequence's cache slots
    positions: torch.Tensor,  # (T,)
    scale: float,
    window: int | None,
    softcap: float | None = None,  # scores become softcap * tanh(scores / softcap) (Gemma 2)
    sinks: torch.Tensor | None = None,  # (n_h,): a logit per head joining the softmax's denominator (gpt-oss)
) -> torch.Tensor:
    """Causal attention per token over its own sequence's keys; returns (T, n_h * hd)."""
    n_h, hd, dev = q.shape[1], q.shape[2], q.device
    group = n_h // keys.shape[1]
    width = -(-kv_slots.shape[1] // KEY_BLOCK) * KEY_BLOCK
    kv_slots = F.pad(kv_slots, (0, width - kv_slots.shape[1]))

    def tile(rows: torch.Tensor) -> torch.Tensor:
        idx = rows  # (TILE,) token indices
        qt = q[idx].float()  # (TILE, n_h, hd)
        pos = positions[idx]  # (TILE,)
        m = torch.full((TILE, n_h), float("-inf"), device=dev)
        denom = torch.zeros(TILE, n_h, device=dev)
        acc = torch.zeros(TILE, n_h, hd, device=dev)
        for j in range(0, int(pos.max()) + 1, KEY_BLOCK):
            slots = kv_slots[idx, j : j + KEY_BLOCK]  # (TILE, KEY_BLOCK)
            k = keys[slots].float().repeat_interleave(group, dim=2)  # (TILE, KEY_BLOCK, n_h, hd)
            v = values[slots].float().repeat_interleave(group, dim=2)
            s = (qt[:, None] * k).sum(-1) * scale  # (TILE, KEY_BLOCK, n_h)
            if softcap is not None:
                s = torch.tanh(s / softcap) * softcap
            k_pos = torch.arange(j, j + KEY_BLOCK, device=dev)
            allowed = k_pos[None, :] <= pos[:, None]  # (TILE, KEY_BLOCK)
            if window is not None:
                allowed &= (pos[:, None] - k_pos[None, :]) < window
            s = s.masked_fill(~allowed[:, :, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=1))  # (TILE, n_h)
            safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - safe)
            p = torch.exp(s - safe[:, None])  # (TILE, KEY_BLOCK, n_h)
            denom = denom * alpha + p.sum(1)
            acc = acc * alpha[..., None] + (p[..., None] * v).sum(1)
            m = m_new
        if sinks is not None:  # one more key whose value is zero
            m_new = torch.maximum(m, sinks.float())
            denom = denom * torch.exp(m - m_new) + torch.exp(sinks.float() - m_new)
            acc = acc * torch.exp(m - m_new)[..., None]
        return (acc / denom[..., None]).to(q.dtype).flatten(1)  # (TILE, n_h * hd)

    n = q.shape[0]
    rows = torch.arange(n, device=dev)
    pad = -n % TILE
    if pad:
        rows = torch.cat([rows, rows.new_zeros(pad)])  # padded rows repeat token 0; dropped below
    return torch.cat([tile(r) for r in rows.split(TILE)])[:n]
