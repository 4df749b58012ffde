"""Rotary position embeddings, NeoX layout (rotate halves), as HF transformers computes them.

Inverse frequencies come from transformers' own RoPE initialisers, so scaled variants (linear,
llama3, yarn) match the reference exactly.
"""

from __future__ import annotations

import torch

from trtserve.engine.model_config import ModelConfig


def inv_freq_and_scale(cfg: ModelConfig) -> tuple[torch.Tensor, float]:
    scaling = dict(cfg.rotary_scaling or {})
    rope_type = scaling.pop("rope_type", scaling.pop("type", "default"))
    if rope_type == "default":  # transformers' formula, without importing it (a second of a cold start)
        dim = cfg.head_size
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
    inv, scale = ROPE_INIT_FUNCTIONS[rope_type](hf, torch.device("cpu"))
    return inv.float(), float(scale)


class Rope:
    """cos/sin tables for positions [0, max_positions), looked up once per forward pass."""

    def __init__(self, cfg: ModelConfig, max_positions: int, dtype: torch.dtype, device: torch.device):
        inv, scale = inv_freq_and_scale(cfg)
        pos = torch.arange(max_positions, dtype=torch.float)
        freqs = torch.outer(pos, inv)  # (positions, head_dim/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (positions, head_dim)
        self.cos = (emb.cos() * scale).to(dtype=dtype, device=device)
        sin = emb.sin() * scale
        # rotate_half(x) * sin == roll(x, half) * [-sin_lo, sin_hi]: the sign lives in the table
        half = sin.shape[-1] // 2
        self.signed_sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1).to(dtype=dtype, device=device)

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin) rows of the tokens' positions, (tokens, 1, head_dim), for `apply`."""
        return self.cos[positions].unsqueeze(1), self.signed_sin[positions].unsqueeze(1)

    @staticmethod
    def apply(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: (tokens, heads, head_dim), NeoX layout: x * cos + rotate_half(x) * sin, bit for bit."""
        cos, signed_sin = tables
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin
