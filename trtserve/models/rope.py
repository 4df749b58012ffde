"""Rotary position embeddings, NeoX layout (rotate halves), as HF transformers computes them.

Inverse frequencies come from transformers' own RoPE initialisers, so scaled variants (linear,
llama3, yarn) match the reference exactly.
"""

from __future__ import annotations

import torch

from trtserve.engine.model_config import ModelConfig


def inv_freq_and_scale(cfg: ModelConfig, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """The inverse frequencies over the rotated dims and the cos/sin scale; seq_len: the length
    LongRoPE picks its factors by (None: its short ones)."""
    scaling = dict(cfg.rotary_scaling or {})
    rope_type = scaling.pop("rope_type", scaling.pop("type", "default"))
    if rope_type == "default":  # transformers' formula, without importing it (a second of a cold start)
        dim = getattr(cfg, "rotary_dim", None) or cfg.head_size  # a partial rotary's dims (ModelConfig.rotary_dim)
        inv = 1.0 / (cfg.rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv, 1.0
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": rope_type, "rope_theta": cfg.rotary_base, **scaling}
    hf = LlamaConfig(
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_attention_heads,
        head_dim=cfg.head_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters=params,
    )
    inv, scale = ROPE_INIT_FUNCTIONS[rope_type](hf, torch.device("cpu"), seq_len=seq_len)
    return inv.float(), float(scale)


def _cos_signed_sin(inv: torch.Tensor, scale: float, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.arange(max_positions, dtype=torch.float)
    freqs = torch.outer(pos, inv)  # (positions, rotary_dim/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (positions, rotary_dim)
    sin = emb.sin() * scale
    # rotate_half(x) * sin == roll(x, half) * [-sin_lo, sin_hi]: the sign lives in the table
    half = sin.shape[-1] // 2
    return emb.cos() * scale, torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)


class Rope:
    """cos/sin tables for positions [0, max_positions), looked up once per forward pass.

    LongRoPE (ModelConfig.long_rope) keeps two tables, short and long factors, one after the other: HF
    computes each forward call's tokens with the long factors when the call's last position reaches past
    original_max_position_embeddings, so a request's prompt takes the long ones when it is longer than
    that and each later token when its own position is; `rows` picks each token's row so."""

    def __init__(self, cfg: ModelConfig, max_positions: int, dtype: torch.dtype, device: torch.device):
        inv, scale = inv_freq_and_scale(cfg)
        cos, signed_sin = _cos_signed_sin(inv, scale, max_positions)
        self.max_positions = max_positions
        self.long_from: int | None = None  # LongRoPE: the longest sequence the short factors serve
        if getattr(cfg, "long_rope", False):
            self.long_from = int(cfg.rotary_scaling["original_max_position_embeddings"])
            long_cos, long_sin = _cos_signed_sin(inv_freq_and_scale(cfg, self.long_from + 1)[0], scale, max_positions)
            cos, signed_sin = torch.cat([cos, long_cos]), torch.cat([signed_sin, long_sin])  # (2 positions, dim)
        self.rotary_dim = cos.shape[-1]
        self.cos = cos.to(dtype=dtype, device=device)
        self.signed_sin = signed_sin.to(dtype=dtype, device=device)

    def rows(self, positions: torch.Tensor, prompt_lens: torch.Tensor | None) -> torch.Tensor:
        """Each token's table row: its position, in the long half where LongRoPE takes the long factors
        (its request's prompt, or the sequence up to it, longer than long_from)."""
        if self.long_from is None:
            return positions
        seen = positions + 1 if prompt_lens is None else torch.maximum(prompt_lens, positions + 1)
        return positions + self.max_positions * (seen > self.long_from)

    def tables(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin) of the tokens' rows (their positions, or `rows`), (tokens, 1, rotary_dim), for `apply`."""
        return self.cos[rows].unsqueeze(1), self.signed_sin[rows].unsqueeze(1)

    @staticmethod
    def apply(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: (tokens, heads, head_dim), NeoX layout: x * cos + rotate_half(x) * sin over the first
        rotary_dim dims, the rest passed through (HF's partial rotary), bit for bit."""
        cos, signed_sin = tables
        dim = cos.shape[-1]
        if dim == x.shape[-1]:
            return x * cos + x.roll(dim // 2, dims=-1) * signed_sin
        rot = x[..., :dim]
        return torch.cat([rot * cos + rot.roll(dim // 2, dims=-1) * signed_sin, x[..., dim:]], dim=-1)
