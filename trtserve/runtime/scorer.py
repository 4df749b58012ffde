"""Runs the engine's own forward pass over one window of tokens and returns the logits at chosen rows.

The scorer owns a private paged KV cache just large enough for one window, with prefix caching
off, so no window can see another's keys; the window's blocks are freed after every call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trtserve.models.batch import SeqChunk, make_batch
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.loader import LoadedEngine

_REQUEST_ID = "eval-window"


class WindowScorer:
    def __init__(self, engine: LoadedEngine, max_window: int):
        self.model = engine.model
        self.tokens_per_block = engine.config.build_config.plugin_config.tokens_per_block
        num_blocks = -(-max_window // self.tokens_per_block)
        self.blocks = BlockManager(num_blocks, self.tokens_per_block, "eval", enable_prefix_caching=False)
        self.kv = self.model.new_kv_cache(num_blocks, self.tokens_per_block)

    def logits(self, tokens: Sequence[int], rows: Sequence[int]) -> torch.Tensor:
        """Float32 logits (len(rows), vocab) on CPU; row r holds the prediction made after tokens[: r + 1]."""
        if not self.blocks.allocate(_REQUEST_ID, [], len(tokens)):
            raise ValueError(
                f"a window of {len(tokens)} tokens does not fit the scorer's {self.blocks.num_blocks} blocks"
            )
        try:
            cfg = self.model.cfg
            batch = make_batch(
                [SeqChunk(list(tokens), 0, self.blocks.block_table(_REQUEST_ID))],
                self.tokens_per_block,
                self.model.device,
                [list(rows)],
                cfg.num_attention_heads // cfg.num_key_value_heads,
            )
            return self.model.forward(batch, self.kv).cpu()
        finally:
            self.blocks.free(_REQUEST_ID)
