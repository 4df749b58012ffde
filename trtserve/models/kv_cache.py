"""The paged KV cache's storage. Which blocks belong to whom is the block manager's business."""

from __future__ import annotations

import torch

from trtserve.models.config import ModelConfig


class PagedKVCache:
    """K and V for every layer, as `num_blocks * tokens_per_block` slots of (kv_heads, head_dim)."""

    def __init__(
        self, cfg: ModelConfig, num_blocks: int, tokens_per_block: int, dtype: torch.dtype, device: torch.device
    ):
        self.num_blocks = num_blocks
        self.tokens_per_block = tokens_per_block
        slots = num_blocks * tokens_per_block
        # (layers, 2 [K, V], slots, kv_heads, head_dim)
        # torch.empty: pages are committed as blocks are first written, not at startup.
        self.data = torch.empty(
            cfg.num_hidden_layers, 2, slots, cfg.num_key_value_heads, cfg.head_size, dtype=dtype, device=device
        )

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots: (T,); k, v: (T, kv_heads, head_dim)."""
        self.data[layer, 0].index_copy_(0, slots, k)
        self.data[layer, 1].index_copy_(0, slots, v)

    def gather(self, layer: int, kv_slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """kv_slots: (B, max_kv) -> K, V each (B, max_kv, kv_heads, head_dim)."""
        return self.data[layer, 0][kv_slots], self.data[layer, 1][kv_slots]

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole blocks src -> dst in every layer (copy-on-write for forked sequences)."""
        if not pairs:
            return
        bs = self.tokens_per_block
        src = torch.cat([torch.arange(s * bs, (s + 1) * bs) for s, _ in pairs]).to(self.data.device)
        dst = torch.cat([torch.arange(d * bs, (d + 1) * bs) for _, d in pairs]).to(self.data.device)
        self.data[:, :, dst] = self.data[:, :, src]
