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

    def propose(self, token_ids: Sequence[int], k: int, seq: Hashable = None) -> list[int]:
        """k greedy tokens of the draft after token_ids; [] when its cache has no room for them."""
        seen = self._seen.get(seq)
        if seen is None:
            if not self.blocks.allocate(seq, [], len(token_ids) + k):
                return []
            seen = self._seen[seq] = []
        keep = _common_prefix(seen, token_ids, len(token_ids) - 1)  # the last token always runs: its logits
        del seen[keep:]
        self.blocks.truncate(seq, keep)
        if not self.blocks.append_slots(seq, len(token_ids) + k):
            self.forget(seq)
            return []
        out: list[int] = []
        new = list(token_ids[keep:])
        while len(out) < k:
            token = self._next(seq, new, len(seen))
            seen += new
            out.append(token)
            new = [token]
        return out

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

    def _next(self, seq: Hashable, tokens: list[int], start: int) -> int:
        """Run `tokens` at positions start.. and return the draft's argmax after the last."""
        cfg = self.model.cfg
        # after the prompt, the tokens it has not seen (the target's kept ones) run as decode rows
        chunk = SeqChunk(tokens, start, self.blocks.block_table(seq), len(tokens) if start else 1)
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        batch = make_batch([chunk], DRAFT_TOKENS_PER_BLOCK, cfg.sliding_window, self.model.device, None, group)
        logits = self.model.forward(batch, self.kv)  # (1, vocab)
        return int(torch.argmax(logits[0]))


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
