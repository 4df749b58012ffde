"""A step's rows under LoRA adapters, and the adapters' updates added after each linear.

Two ways to run them, the same updates in exact arithmetic:

- per segment (deterministic mode): for each run of rows of one adapter, x·Aᵀ then ·Bᵀ with that
  adapter's own shapes, so a row's result does not depend on which other adapters share the step;
- stacked (otherwise): the step's adapters side by side, one (C, in) A and one (C, out) Bᵀ per linear
  (`Stack`, built once per set of active adapters), and a (rows, C) 0/1 mask keeping each row's own
  columns: x·Aᵀ, times the mask, then one addmm. Three ops per linear whatever the number of adapters,
  where per-segment costs five per adapter: at decode sizes the ops' overhead, not their arithmetic,
  is the cost. Base rows' masked columns are exact zeros, so they get exactly the base model's output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from trtserve.kernels.decode_layers import LINEARS
from trtserve.models.lora import LoraWeights


@dataclass
class Stack:
    """The updates of several adapters side by side, per layer and linear role: A (C, in) and Bᵀ (C, out),
    adapter k in columns spans[role][k] (an adapter not targeting a role has an empty span)."""

    adapters: tuple[LoraWeights, ...]
    layers: list[dict[str, tuple[torch.Tensor, torch.Tensor]]]
    spans: dict[str, list[tuple[int, int]]]
    native: object = None  # the decoder's packing of it for the one-call decode step (False: cannot)


def stack(adapters: tuple[LoraWeights, ...]) -> Stack:
    n_layers = len(adapters[0].layers)
    roles = sorted({role for w in adapters for layer in w.layers for role in layer})
    spans: dict[str, list[tuple[int, int]]] = {}
    dims: dict[str, tuple[int, int]] = {}  # role -> (in, out)
    for role in roles:
        col, spans[role] = 0, []
        for w in adapters:
            width = max((layer[role].a.shape[0] for layer in w.layers if role in layer), default=0)
            spans[role].append((col, col + width))
            col += width
        t = next(layer[role] for w in adapters for layer in w.layers if role in layer)
        dims[role] = (t.a.shape[1], t.bt.shape[1])
    layers = []
    for i in range(n_layers):
        per_role = {}
        for role in roles:
            targeted = [(k, w.layers[i][role]) for k, w in enumerate(adapters) if role in w.layers[i]]
            if not targeted:
                continue
            (n_in, n_out), width = dims[role], spans[role][-1][1]
            t0 = targeted[0][1]
            if len(targeted) == 1 and t0.a.shape[0] == width:  # one adapter over every column: its own tensors
                per_role[role] = (t0.a, t0.bt)
                continue
            a = t0.a.new_zeros(width, n_in)  # (C, in)
            bt = t0.bt.new_zeros(width, n_out)  # (C, out)
            for k, t in targeted:
                c0 = spans[role][k][0]
                a[c0 : c0 + t.a.shape[0]] = t.a
                bt[c0 : c0 + t.a.shape[0]] = t.bt
            per_role[role] = (a, bt)
        layers.append(per_role)
    return Stack(adapters, layers, spans)


@dataclass
class LoraStep:
    """Which rows of a step's flat batch run under which adapter: rows [start, end) of each segment
    (rows of the base model are in none). The decoder adds the updates after each linear (`add`)."""

    segments: list[tuple[int, int, LoraWeights]]  # (first row, end row, adapter), rows in flat-batch order
    num_rows: int  # rows of the flat batch (T)
    stacked: Stack | None = None  # set by `use`: run stacked rather than per segment
    masks: dict[str, torch.Tensor] = field(default_factory=dict)  # role -> (T, C) each row's own columns
    spans: torch.Tensor | None = None  # (T, len(LINEARS), 2) int64: each row's columns [c0, c1) per linear

    @property
    def adapters(self) -> tuple[LoraWeights, ...]:
        """The step's distinct adapters, in order of first row."""
        return tuple(dict.fromkeys(w for _, _, w in self.segments))

    def use(self, s: Stack) -> None:
        """Run stacked over `s` (which holds every adapter of the step)."""
        self.stacked = s
        index = {w: k for k, w in enumerate(s.adapters)}
        spans = torch.zeros(self.num_rows, len(LINEARS), 2, dtype=torch.int64)  # base rows: empty spans
        for f, role in enumerate(LINEARS):
            for start, end, w in self.segments if role in s.spans else ():
                spans[start:end, f] = torch.tensor(s.spans[role][index[w]])
        self.spans = spans
        if len(self.segments) == 1 and self.segments[0][:2] == (0, self.num_rows) and len(s.adapters) == 1:
            return  # every row under the one adapter: no column to mask
        some = next(t for w in s.adapters for layer in w.layers for t in layer.values())
        for role, spans in s.spans.items():
            mask = torch.zeros(self.num_rows, spans[-1][1], dtype=some.a.dtype)
            for start, end, w in self.segments:
                c0, c1 = spans[index[w]]
                mask[start:end, c0:c1] = 1
            self.masks[role] = mask.to(some.a.device)

    def add(
        self,
        layer: int,
        role: str,
        x: torch.Tensor,  # (T, in) the linear's input
        out: torch.Tensor,  # (T, out) its output, updated in place
        linear: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],  # F.linear-like (the decoder's)
    ) -> torch.Tensor:
        if self.stacked is not None:
            ab = self.stacked.layers[layer].get(role)
            if ab is not None:
                shrunk = linear(x, ab[0])  # (T, C)
                if self.masks:
                    shrunk.mul_(self.masks[role])  # each row keeps its own adapter's columns
                out.addmm_(shrunk, ab[1])  # += (T, C) @ (C, out)
            return out
        for start, end, w in self.segments:
            t = w.layers[layer].get(role)
            if t is not None:
                out[start:end] += linear(linear(x[start:end], t.a), t.bt.t())  # (rows, sum r) then (rows, out)
        return out


def segments_of(rows: list[tuple[int, LoraWeights | None]]) -> LoraStep | None:
    """A LoraStep from each chunk's (row count, adapter or None) in flat-batch order: consecutive chunks
    of one adapter share a segment. None when no row runs under an adapter."""
    segs: list[tuple[int, int, LoraWeights]] = []
    pos = 0
    for n, w in rows:
        if w is not None:
            if segs and segs[-1][2] is w and segs[-1][1] == pos:
                segs[-1] = (segs[-1][0], pos + n, w)
            else:
                segs.append((pos, pos + n, w))
        pos += n
    return LoraStep(segs, pos) if segs else None
