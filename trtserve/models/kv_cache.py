"""The paged KV cache's storage. Which blocks belong to whom is the block manager's business."""

from __future__ import annotations

import math

import torch

from trtserve.engine.model_config import ModelConfig
from trtserve.models import host_memory
from trtserve.models.quant_formats import KV_CACHE_FORMATS


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed tensor. On CPU it lives in an anonymous memory map: the kernel hands out zeroed
    pages on first write, so the untouched part of a large cache costs no memory (torch.zeros
    writes every page up front). The tensor keeps the map alive; it is unmapped with the tensor."""
    nbytes = math.prod(shape) * dtype.itemsize
    if torch.device(device).type != "cpu" or nbytes == 0:
        return torch.zeros(shape, dtype=dtype, device=device)
    return host_memory.zeros(shape, dtype)


class PagedKVCache:
    """K and V for every layer, as `num_blocks * tokens_per_block` slots of (kv_heads, head_dim).

    With `kv_quant` (a kv_cache_quant_algo of models/quant_formats.py: "INT8", "FP8") the slots hold
    8-bit values x / scale (per layer, one for K and one for V: the checkpoint's k_ and
    v_cache_scaling_factor), stored as the format's storage dtype; reads return `dtype` again.
    With `kv_dtype` (the kv_cache_dtype engine option: a 16-bit float under a float32 model) the slots
    hold keys and values rounded to it, and reads widen them to `dtype` again; the kernels read them
    where they lie (`stored_keys`).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        num_blocks: int,
        tokens_per_block: int,
        dtype: torch.dtype,
        device: torch.device,
        kv_quant: str | None = None,
        scales: torch.Tensor | None = None,  # (layers, 2 [K, V]) float32
        kv_dtype: torch.dtype | None = None,  # the slots' float dtype, where not `dtype`
    ):
        self.num_blocks = num_blocks
        self.tokens_per_block = tokens_per_block
        self.dtype = dtype
        self.kv_quant = kv_quant
        self.scales = None if scales is None else scales.to(device)
        self._format = None
        if kv_quant:
            spec = KV_CACHE_FORMATS[kv_quant]
            self._format = (getattr(torch, spec.value_dtype), spec.limit, getattr(torch, spec.storage_dtype))
        slots = num_blocks * tokens_per_block
        if kv_quant and kv_dtype not in (None, dtype):
            raise ValueError(f"an 8-bit KV cache ({kv_quant}) has no other float dtype ({kv_dtype})")
        storage = self._format[2] if self._format else kv_dtype or dtype
        # (layers, 2 [K, V], slots, kv_heads, head_dim)
        # Zeroed, not empty: attention reads whole blocks, and masked slots must hold finite
        # values (a masked NaN still poisons softmax(scores) @ V, since 0 * NaN = NaN).
        shape = (cfg.num_hidden_layers, 2, slots, cfg.num_key_value_heads, cfg.head_size)
        self.data = lazy_zeros(shape, storage, device)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots: (T,); k, v: (T, kv_heads, head_dim)."""
        self.data[layer, 0].index_copy_(0, slots, self._quantize(k, layer, 0))
        self.data[layer, 1].index_copy_(0, slots, self._quantize(v, layer, 1))

    def _quantize(self, x: torch.Tensor, layer: int, kv: int) -> torch.Tensor:
        if self._format is None:
            return x.to(self.data.dtype)  # no copy unless the cache is narrower
        value, limit, storage = self._format  # (value dtype, its largest magnitude, storage dtype)
        x = (x.float() / self.scales[layer, kv]).clamp_(-limit, limit)
        return (x if value.is_floating_point else x.round_()).to(value).view(storage)

    def _dequantize(self, x: torch.Tensor, layer: int, kv: int) -> torch.Tensor:
        if self._format is None:
            return x.to(self.dtype)
        return (x.view(self._format[0]).float() * self.scales[layer, kv]).to(self.dtype)

    def gather_blocks(self, layer: int, block_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the given blocks, (len(block_ids), tokens_per_block, kv_heads, head_dim), in dtype."""
        k, v = self.blocks(layer)
        keys = self._dequantize(k.index_select(0, block_ids), layer, 0)
        values = self._dequantize(v.index_select(0, block_ids), layer, 1)
        return keys, values

    def layer_keys(self, layer: int) -> torch.Tensor:
        """Every slot's K of one layer, (slots, kv_heads, head_dim), in dtype (a copy where the cache is narrower)."""
        return self._dequantize(self.data[layer, 0], layer, 0)

    def layer_values(self, layer: int) -> torch.Tensor:
        return self._dequantize(self.data[layer, 1], layer, 1)

    def stored_keys(self, layer: int) -> torch.Tensor | None:
        """One layer's K of every slot as stored, for kernels that read a float cache in place; None for 8-bit."""
        return None if self._format else self.data[layer, 0]

    def stored_values(self, layer: int) -> torch.Tensor | None:
        return None if self._format else self.data[layer, 1]

    def slots_kv(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the given slots, (len(slots), kv_heads, head_dim) each, in dtype."""
        return tuple(self._dequantize(self.data[layer, i].index_select(0, slots), layer, i) for i in (0, 1))

    def blocks(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's K and V as (num_blocks, tokens_per_block, kv_heads, head_dim) views."""
        shape = (self.num_blocks, self.tokens_per_block, *self.data.shape[-2:])
        return self.data[layer, 0].view(shape), self.data[layer, 1].view(shape)

    def read_blocks(self, block_ids: list[int]) -> torch.Tensor:
        """Whole blocks as stored (8-bit caches stay 8-bit), for another tier or process to hold:
        (len(block_ids), layers, 2 [K, V], tokens_per_block, kv_heads, head_dim), a copy."""
        blocks = self._blocks_view()
        out = self.data.new_empty((len(block_ids), *blocks.shape[:2], *blocks.shape[3:]))
        for i, b in enumerate(block_ids):  # one copy a block: half the time of a gather and a permute
            out[i].copy_(blocks[:, :, b])
        return out

    def write_blocks(self, block_ids: list[int], data: torch.Tensor) -> None:
        """Put blocks read by read_blocks (same layout and storage dtype) back, bit for bit."""
        blocks = self._blocks_view()
        expected = (len(block_ids), *blocks.shape[:2], *blocks.shape[3:])
        if tuple(data.shape) != expected or data.dtype != self.data.dtype:
            raise ValueError(
                f"KV blocks of shape {tuple(data.shape)} {data.dtype}; this cache stores {expected} {self.data.dtype}"
            )
        for i, b in enumerate(block_ids):
            blocks[:, :, b].copy_(data[i])

    def _blocks_view(self) -> torch.Tensor:
        """The storage as (layers, 2, blocks, tokens_per_block, kv_heads, head_dim)."""
        return self.data.view(*self.data.shape[:2], self.num_blocks, self.tokens_per_block, *self.data.shape[-2:])

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole blocks src -> dst in every layer (copy-on-write for forked sequences)."""
        if not pairs:
            return
        bs = self.tokens_per_block
        src = torch.cat([torch.arange(s * bs, (s + 1) * bs) for s, _ in pairs]).to(self.data.device)
        dst = torch.cat([torch.arange(d * bs, (d + 1) * bs) for _, d in pairs]).to(self.data.device)
        self.data[:, :, dst] = self.data[:, :, src]
