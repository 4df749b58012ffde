"""Offline generation: `trtserve.LLM(engine_dir).generate(prompts, SamplingParams(...))`.

Runs all prompts to completion on the paged forward pass with a simple allocation: each sequence
gets the blocks it can ever need up front. The in-flight scheduler and block manager replace this
loop for serving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtserve.errors import UserError
from trtserve.models.batch import SeqChunk, make_batch
from trtserve.runtime.loader import load_engine
from trtserve.runtime.sampler import make_generator, sample
from trtserve.runtime.sampling_params import SamplingParams


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)  # generated tokens
    text: str = ""
    finish_reason: str | None = None  # "stop" | "length"


@dataclass
class _Seq:
    out: RequestOutput
    params: SamplingParams
    blocks: list[int]
    generator: object
    computed: int = 0  # tokens in the KV cache

    @property
    def tokens(self) -> list[int]:
        return self.out.prompt_token_ids + self.out.token_ids


class LLM:
    def __init__(self, engine_dir: str | Path, device: str | None = None):
        self.engine = load_engine(engine_dir, device)
        self.tokenizer = self.engine.tokenizer
        self.limits = self.engine.config.build_config

    def encode(self, prompt: str | list[int], chat: bool = False) -> list[int]:
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        if chat:
            messages = [{"role": "user", "content": prompt}]
            return list(
                self.tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=True, return_dict=True
                )["input_ids"]
            )
        return list(self.tokenizer.encode(prompt))

    def generate(
        self, prompts: str | list[str] | list[list[int]], params: SamplingParams | None = None, chat: bool = False
    ) -> list[RequestOutput]:
        params = params or SamplingParams()
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        seqs = self._admit([self.encode(p, chat) for p in prompts], params)
        bs = self.limits.plugin_config.tokens_per_block
        kv = self.engine.model.new_kv_cache(sum(len(s.blocks) for s in seqs), bs)
        running = list(seqs)
        while running:
            for group in self._step_groups(running):
                chunks = [SeqChunk(s.tokens[s.computed :], s.computed, s.blocks) for s in group]
                logits = self.engine.model.forward(
                    make_batch(chunks, bs, self.engine.model.cfg.sliding_window, self.engine.model.device), kv
                )
                for s, row in zip(group, logits, strict=True):
                    s.computed = len(s.tokens)
                    self._append(s, sample(row, s.params, s.generator))
            running = [s for s in running if s.out.finish_reason is None]
        for s in seqs:
            s.out.text = self.tokenizer.decode(s.out.token_ids, skip_special_tokens=True)
        return [s.out for s in seqs]

    def _admit(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[_Seq]:
        bs = self.limits.plugin_config.tokens_per_block
        seqs, next_block = [], 0
        for ids in prompt_ids:
            if not ids:
                raise UserError("a prompt is empty; give at least one token")
            total = len(ids) + params.max_tokens
            if total > self.limits.max_seq_len:
                raise UserError(
                    f"prompt of {len(ids)} tokens plus max_tokens {params.max_tokens} exceeds the engine's max_seq_len {self.limits.max_seq_len}; shorten one"
                )
            n_blocks = -(-total // bs)
            seqs.append(
                _Seq(RequestOutput(ids), params, list(range(next_block, next_block + n_blocks)), make_generator(params))
            )
            next_block += n_blocks
        return seqs

    def _step_groups(self, running: list[_Seq]) -> list[list[_Seq]]:
        """Split a step into groups of at most max_num_tokens new tokens and max_batch_size sequences."""
        groups, cur, cur_tokens = [], [], 0
        for s in running:
            n = len(s.tokens) - s.computed
            if cur and (cur_tokens + n > self.limits.max_num_tokens or len(cur) >= self.limits.max_batch_size):
                groups.append(cur)
                cur, cur_tokens = [], 0
            cur.append(s)
            cur_tokens += n
        return groups + [cur] if cur else groups

    def _append(self, s: _Seq, token: int) -> None:
        s.out.token_ids.append(token)
        p = s.params
        if token in p.stop_token_ids or (not p.ignore_eos and token in self.engine.eos_token_ids):
            s.out.finish_reason = "stop"
        elif len(s.out.token_ids) >= p.max_tokens:
            s.out.finish_reason = "length"
