"""Runs one scheduled step on the model: lays out the flat batch, returns the wanted logits."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from trtserve.engine.ids import SequenceId
from trtserve.models.batch import SeqChunk, make_batch
from trtserve.models.decoder import DecoderModel
from trtserve.models.kv_cache import PagedKVCache
from trtserve.models.lora import LoraWeights
from trtserve.models.lora_step import Stack, segments_of, stack
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.features.lora import NoLora
from trtserve.runtime.features.pooling import NoPooling
from trtserve.runtime.features.vision import NoVision
from trtserve.runtime.sampler import logprobs_of
from trtserve.runtime.schedule import SchedulerOutput


@dataclass
class StepLogits:
    logits: torch.Tensor  # (N, vocab) float32
    # per chunk of the step: the row it samples from, if it samples; a speculating chunk's rows are
    # sample_row .. sample_row + len(draft) (its last token's, then each proposal's)
    sample_row: list[int | None]
    prompt_rows: list[int | None]  # per chunk: the row of its first prompt-logprob position, if any
    # per chunk: the final hidden states (rows, hidden) its pooling asked for (features/pooling.py), if any
    pooled: list[torch.Tensor | None] = field(default_factory=list)

    def prompt_logprobs(self, out: SchedulerOutput) -> dict[SequenceId, list]:
        """Record the prompt logprobs each chunk computed; returns the lists completed this step."""
        done = {}
        for c, first in zip(out.chunks, self.prompt_rows, strict=True):
            r = c.request
            if r.prompt_logprobs is None:
                continue
            positions = c.prompt_logprob_positions
            if first is not None:
                logp = torch.log_softmax(self.logits[first : first + len(positions)], dim=-1)
                for j, pos in enumerate(positions):
                    r.prompt_logprobs[pos + 1] = logprobs_of(
                        logp[j], r.prompt_token_ids[pos + 1], r.params.prompt_logprobs or 0
                    )
            if c.completes_prompt:
                done[r.seq], r.prompt_logprobs = r.prompt_logprobs, None
        return done


class ModelRunner:
    def __init__(
        self,
        model: DecoderModel,
        kv: PagedKVCache,
        blocks: BlockManager,
        lora: NoLora | None = None,
        pooling: NoPooling | None = None,
        vision: NoVision | None = None,
    ):
        self.model, self.kv, self.blocks, self.lora = model, kv, blocks, lora or NoLora()
        self.vision = vision or NoVision()  # the image rows whose embeddings the encoder's output replaces
        self.pooling = pooling or NoPooling()  # which rows' final hidden states a pooling chunk needs
        self._stacks: OrderedDict[tuple[LoraWeights, ...], Stack] = OrderedDict()  # by adapter set, LRU
        self._last_set: tuple[LoraWeights, ...] = ()  # the previous step's adapters

    def execute(self, step: SchedulerOutput) -> StepLogits:
        self.kv.copy_blocks(step.block_copies)
        seqs, rows_per_seq = [], []
        sample_row: list[int | None] = []
        prompt_rows: list[int | None] = []
        n_rows = n_tokens = 0
        pool_tokens: list[list[int]] = []  # per chunk: flat token indices whose final hidden states it pools
        for c in step.chunks:
            r = c.request
            table, both_ways = self.blocks.block_table(r.seq), self.vision.bidirectional(c)
            seqs.append(SeqChunk(c.token_ids, c.start, table, 1 + len(c.draft), r.num_prompt_tokens, both_ways))
            rows = [p - c.start for p in c.prompt_logprob_positions]
            prompt_rows.append(n_rows if rows else None)
            first = c.num_new_tokens - 1 - len(c.draft)  # the row of the sequence's last token
            samples = c.samples and not self.pooling.pools(r)  # a pooling request emits no token
            if samples:
                rows += range(first, c.num_new_tokens)
            sample_row.append(n_rows + len(rows) - 1 - len(c.draft) if samples else None)
            rows_per_seq.append(rows)
            n_rows += len(rows)
            pool_tokens.append([n_tokens + i for i in self.pooling.rows(c)])
            n_tokens += c.num_new_tokens
        cfg = self.model.cfg
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        batch = make_batch(seqs, self.kv.tokens_per_block, self.model.device, rows_per_seq, group)
        if (embeds := self.vision.embeds(step.chunks)) is not None:
            batch = replace(batch, embeds=embeds)
        lora = None
        if self.lora.enabled:  # each chunk's rows under its adapter (active: the scheduler holds it)
            w = [self.lora.weights(c.request) for c in step.chunks]
            lora = segments_of([(c.num_new_tokens, x) for c, x in zip(step.chunks, w, strict=True)])
            # deterministic mode runs per segment: it keeps a row's result independent of the other adapters
            stacked = lora is not None and not self.model.deterministic and self._stack(lora.adapters)
            if stacked:
                lora.use(stacked)
        if not any(pool_tokens):
            logits = self.model.forward(batch, self.kv, lora)
            return StepLogits(logits.cpu(), sample_row, prompt_rows)
        return self._pooled_step(batch, lora, sample_row, prompt_rows, pool_tokens)

    @torch.inference_mode()
    def _pooled_step(self, batch, lora, sample_row, prompt_rows, pool_tokens: list[list[int]]) -> StepLogits:
        """A step with pooling chunks: logits at the sampled rows, final hidden states at the pooled ones."""
        h = self.model.run(batch, self.kv, lora)  # (T, hidden)
        if batch.logits_indices.numel():
            logits = self.model.logits(h[batch.logits_indices]).cpu()  # (N, vocab)
        else:
            logits = torch.empty(0, self.model.cfg.vocab_size)
        flat = torch.tensor([t for ts in pool_tokens for t in ts], dtype=torch.long, device=h.device)
        hidden = self.model.final_hidden(h[flat]).cpu()  # (pooled rows, hidden)
        pooled, at = [], 0
        for ts in pool_tokens:
            pooled.append(hidden[at : at + len(ts)] if ts else None)
            at += len(ts)
        return StepLogits(logits, sample_row, prompt_rows, pooled)

    def _stack(self, adapters: tuple[LoraWeights, ...]) -> Stack | None:
        """The adapters side by side (lora_step.py), kept for the next steps, or None (run per segment).
        Stacking copies the adapters' weights (~15 ms an adapter of rank 16 on every SmolLM2-135M linear),
        so a set is stacked only when a second step in a row runs it: a set that changes every step runs
        per segment rather than paying that each step. Two sets are kept."""
        key = tuple(sorted(adapters, key=lambda w: w.ref.content_hash))
        last, self._last_set = self._last_set, key
        if key not in self._stacks:
            if key != last:
                return None
            self._stacks[key] = stack(key)
            while len(self._stacks) > 2:
                self._stacks.popitem(last=False)
        self._stacks.move_to_end(key)
        return self._stacks[key]
