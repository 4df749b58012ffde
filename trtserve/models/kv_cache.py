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
        # Zeroed, not empty: attention reads whole blocks, and masked slots must hold finite
        # values (a masked NaN still poisons softmax(scores) @ V, since 0 * NaN = NaN).
        self.data = torch.zeros(
            cfg.num_hidden_layers, 2, slots, cfg.num_key_value_heads, cfg.head_size, dtype=dtype, device=device
        )

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots: (T,); k, v: (T, kv_heads, head_dim)."""
        self.data[layer, 0].index_copy_(0, slots, k)
        self.data[layer, 1].index_copy_(0, slots, v)

    def blocks(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's K and V as (num_blocks, tokens_per_block, kv_heads, head_dim) views."""
        shape = (self.num_blocks, self.tokens_per_block, *self.data.shape[-2:])
        return self.data[layer, 0].view(shape), self.data[layer, 1].view(shape)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole blocks src -> dst in every layer (copy-on-write for forked sequences)."""
        if not pairs:
            return
        bs = self.tokens_per_block
        src = torch.cat([torch.arange(s * bs, (s + 1) * bs) for s, _ in pairs]).to(self.data.device)
        dst = torch.cat([torch.arange(d * bs, (d + 1) * bs) for _, d in pairs]).to(self.data.device)
        self.data[:, :, dst] = self.data[:, :, src]
