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
    sample_row: dict[str, int]  # request id -> row of the logits it samples from
    prompt_rows: dict[str, tuple[int, int]]  # request id -> (first row, prompt position of that row)


class ModelRunner:
    def __init__(self, model: DecoderModel, kv: PagedKVCache, blocks: BlockManager):
        self.model, self.kv, self.blocks = model, kv, blocks

    def execute(self, step: SchedulerOutput) -> StepLogits:
        seqs, rows_per_seq = [], []
        sample_row: dict[str, int] = {}
        prompt_rows: dict[str, tuple[int, int]] = {}
        n_rows = 0
        for c in step.chunks:
            r = c.request
            start = r.num_computed_tokens
            end = start + c.num_new_tokens
            seqs.append(SeqChunk(r.all_token_ids[start:end], start, self.blocks.block_table(r.request_id)))
            rows: list[int] = []
            if r.params.prompt_logprobs is not None and not r.prompt_logprobs_done and start < r.num_prompt_tokens:
                # the logits at position p score prompt token p + 1, for p in [start, min(end - 1, P - 2)]
                last = min(end - 1, r.num_prompt_tokens - 2)
                rows = list(range(0, last - start + 1))
                if rows:
                    prompt_rows[r.request_id] = (n_rows, start)
            if end == r.num_tokens:
                rows.append(c.num_new_tokens - 1)
                sample_row[r.request_id] = n_rows + len(rows) - 1
            rows_per_seq.append(rows)
            n_rows += len(rows)
        cfg = self.model.cfg
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        batch = make_batch(seqs, self.kv.tokens_per_block, cfg.sliding_window, self.model.device, rows_per_seq, group)
        logits = self.model.forward(batch, self.kv)
        return StepLogits(logits.cpu(), sample_row, prompt_rows)
