"""Runs one scheduled step on the model: lays out the flat batch, returns the wanted logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trtserve.models.batch import SeqChunk, make_batch
from trtserve.models.decoder import DecoderModel
from trtserve.models.kv_cache import PagedKVCache
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.scheduler import SchedulerOutput


@dataclass
class StepLogits:
    logits: torch.Tensor  # (N, vocab) float32
    sample_row: list[int | None]  # per chunk of the step: the row it samples from, if it samples
    prompt_rows: list[int | None]  # per chunk: the row of its first prompt-logprob position, if any


class ModelRunner:
    def __init__(self, model: DecoderModel, kv: PagedKVCache, blocks: BlockManager):
        self.model, self.kv, self.blocks = model, kv, blocks

    def execute(self, step: SchedulerOutput) -> StepLogits:
        self.kv.copy_blocks(step.block_copies)
        seqs, rows_per_seq = [], []
        sample_row: list[int | None] = []
        prompt_rows: list[int | None] = []
        n_rows = 0
        for c in step.chunks:
            r = c.request
            seqs.append(SeqChunk(r.all_token_ids[c.start : c.end], c.start, self.blocks.block_table(r.seq)))
            rows = [p - c.start for p in c.prompt_logprob_positions]
            prompt_rows.append(n_rows if rows else None)
            if c.samples:
                rows.append(c.num_new_tokens - 1)
            sample_row.append(n_rows + len(rows) - 1 if c.samples else None)
            rows_per_seq.append(rows)
            n_rows += len(rows)
        cfg = self.model.cfg
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        batch = make_batch(seqs, self.kv.tokens_per_block, cfg.sliding_window, self.model.device, rows_per_seq, group)
        logits = self.model.forward(batch, self.kv)
        return StepLogits(logits.cpu(), sample_row, prompt_rows)
