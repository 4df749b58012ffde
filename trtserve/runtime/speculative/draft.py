"""The draft_model proposer: a second, smaller engine dir run in the same process, proposing k tokens
greedily (q a point mass, as with ngram). It keeps its own paged KV per sequence, in step with the
target: before each proposal the draft's computed tokens are cut back to their common prefix with
the sequence (rejected proposals drop out) and the tokens it has not seen are computed."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import torch

from trtserve.engine.errors import UserError
from trtserve.engine.options import EngineOptions
from trtserve.models.batch import SeqChunk, make_batch
from trtserve.runtime import weights
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.loader import LoadedEngine, load_engine
from trtserve.runtime.speculative.proposer import Ask

DRAFT_TOKENS_PER_BLOCK = 16


class DraftProposer:
    def __init__(self, draft: LoadedEngine, num_blocks: int):
        self.engine = draft
        self.model = draft.model
        self.blocks = BlockManager(num_blocks, DRAFT_TOKENS_PER_BLOCK, "draft", enable_prefix_caching=False)
        self.kv = draft.model.new_kv_cache(num_blocks, DRAFT_TOKENS_PER_BLOCK)
        self._seen: dict[Hashable, list[int]] = {}  # sequence -> tokens whose K/V the draft holds

    @classmethod
    def open(cls, draft_dir: Path, target: LoadedEngine, options: EngineOptions, max_seqs: int) -> DraftProposer:
        """Load the draft beside `target`; UserError unless both use the same tokenizer."""
        draft = load_engine(draft_dir, str(target.model.device), EngineOptions(deterministic=options.deterministic))
        same_vocab = draft.config.pretrained_config.vocab_size == target.config.pretrained_config.vocab_size
        if not same_vocab or draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
            raise UserError(
                f"the draft model {draft_dir} does not use the target's tokenizer (vocabularies differ); "
                "give a draft engine built from a model of the same family and tokenizer"
            )
        max_len = min(draft.config.build_config.max_seq_len, target.config.build_config.max_seq_len)
        return cls(draft, max_seqs * -(-max_len // DRAFT_TOKENS_PER_BLOCK))

    def propose_batch(self, asks: list[Ask]) -> list[list[int]]:
        """k greedy tokens of the draft after each ask's tokens, the sequences run as one batch per
        position; [] for a sequence whose draft KV has no room for them."""
        out: list[list[int]] = [[] for _ in asks]
        rows = []  # [index, seq, tokens the draft has not run, tokens it holds]
        for i, (token_ids, k, seq) in enumerate(asks):
            seen = self._catch_up(seq, token_ids, k)
            if seen is not None:
                rows.append((i, seq, list(token_ids[len(seen) :]), seen))
        while rows:
            for (i, _, new, seen), token in zip(rows, self._next(rows), strict=True):
                seen += new
                out[i].append(token)
                new[:] = [token]
            rows = [row for row in rows if len(out[row[0]]) < asks[row[0]][1]]
        return out

    def _catch_up(self, seq: Hashable, token_ids: Sequence[int], k: int) -> list[int] | None:
        """The tokens whose K/V the draft keeps for `seq`, cut back to their common prefix with token_ids
        (rejected proposals drop out), with room for k more; None where its cache has none."""
        seen = self._seen.get(seq)
        if seen is None:
            if not self.blocks.allocate(seq, [], len(token_ids) + k):
                return None
            seen = self._seen[seq] = []
        keep = _common_prefix(seen, token_ids, len(token_ids) - 1)  # the last token always runs: its logits
        del seen[keep:]
        self.blocks.truncate(seq, keep)
        if not self.blocks.append_slots(seq, len(token_ids) + k):
            self.forget(seq)
            return None
        return seen

    def forget(self, seq: Hashable) -> None:
        """The sequence finished or was preempted: its draft KV goes."""
        self._seen.pop(seq, None)
        self.blocks.free(seq)

    def sleep(self) -> None:
        """No sequence is in flight: the draft's KV cache goes (and on CUDA its weights to host memory)."""
        for seq in list(self._seen):
            self.forget(seq)
        self.kv = None
        weights.to_host(self.model)

    def wake_up(self) -> None:
        if self.kv is None:
            weights.to_device(self.model)
            self.kv = self.model.new_kv_cache(self.blocks.num_blocks, DRAFT_TOKENS_PER_BLOCK)

    def _next(self, rows: list) -> list[int]:
        """Run each row's new tokens after those it holds; the draft's argmax after each row's last."""
        cfg = self.model.cfg
        # after the prompt, the tokens a sequence's draft has not seen (the target's kept ones) run as decode rows
        chunks = [
            SeqChunk(new, len(seen), self.blocks.block_table(seq), len(new) if seen else 1)
            for _, seq, new, seen in rows
        ]
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        batch = make_batch(chunks, DRAFT_TOKENS_PER_BLOCK, self.model.device, None, group)
        logits = self.model.forward(batch, self.kv)  # (rows, vocab)
        return torch.argmax(logits, dim=-1).tolist()


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
