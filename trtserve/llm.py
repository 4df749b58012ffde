"""Offline generation: `trtserve.LLM(engine_dir).generate(prompts, SamplingParams(...))`; on a pooling
engine (docs/pooling.md) `embed(texts)`, `classify(texts)` and `score(text_1, text_2)` instead.

Drives the same engine core and output processing as the server, synchronously.

Without `kv_cache_memory` the KV cache is sized to the requests of each `generate` call
(engine/kv_sizing.py: blocks_for_requests) and replaced by a larger one only when a later call
needs more; a server's default (a share of memory) would be far more than a few prompts need.
"""

from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass
from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.kv_sizing import blocks_for_requests
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.pooling import PoolingConfig
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine
from trtserve.runtime.sizing import size_kv_cache
from trtserve.text.outputs import OutputProcessor, RequestOutput
from trtserve.text.pooling import cosine, pair_ids, probabilities, text_ids

log = logging.getLogger(__name__)
_PREFILL_ONLY = SamplingParams(max_tokens=1, temperature=0.0)


@dataclass(frozen=True)
class Classification:
    """One text's class: the label of the highest probability, and every label's probability."""

    label: str
    probs: list[float]  # in the head's label order (the checkpoint's id2label)


class LLM:
    def __init__(self, engine_dir: str | Path, config: RuntimeConfig | None = None, **overrides):
        # Validated, not model_copy(update=...): "2GiB" becomes a byte count, a typo is refused.
        cfg = RuntimeConfig.model_validate((config or RuntimeConfig()).model_dump() | overrides)
        self.config = cfg
        self.engine = load_engine(engine_dir, cfg.device, cfg.options)
        self.tokenizer = self.engine.tokenizer
        self.fit_to_requests = cfg.kv_cache_memory is None
        # One block until the first generate() says how many its requests need.
        self.core = EngineCore(self.engine, cfg, num_blocks=1 if self.fit_to_requests else None)
        while self.core.idle(32 << 20):  # the weights onto huge pages now, not beside the steps
            pass
        # close() at the latest when the interpreter exits: the second KV tier's prefixes outlive the process
        self._close = weakref.finalize(self, self.core.close)

    def close(self) -> None:
        """A clean stop: the second KV tier (the `kv_offload` option) saves the cached prefixes and writes
        its index, so the next LLM (or server) on the same tier path starts warm. `with LLM(...) as llm:`
        closes on leaving; so does the interpreter's exit. A closed LLM generates no more; closing again
        does nothing."""
        self._close()

    @property
    def closed(self) -> bool:
        return not self._close.alive

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _fit_kv_cache(self, reqs: list[GenerateRequest]) -> None:
        """Grow the KV cache (never shrink it) to what `reqs` need, up to the device's default size."""
        core = self.core
        default = size_kv_cache(self.engine, self.config, core.sched_config.max_batch_size)
        ahead = self.config.speculative.num_speculative_tokens if self.config.speculative else 0  # proposals' slots
        need = blocks_for_requests(
            [(len(r.prompt_token_ids) + r.params.max_tokens + ahead, r.params.n) for r in reqs],
            tokens_per_block=default.tokens_per_block,
            max_seq_len=core.max_seq_len,
            max_batch_size=core.sched_config.max_batch_size,
            ceiling=default.num_blocks,
        )
        if need <= core.blocks.num_blocks:
            return
        core.resize_kv_cache(need)
        log.info(
            "KV cache: %d blocks of %d tokens (%.1f MiB), sized to these requests (at most %d: %s); "
            "pass kv_cache_memory (trtserve generate --kv-cache-memory) to fix its size",
            need,
            default.tokens_per_block,
            need * default.bytes_per_block / 2**20,
            default.num_blocks,
            default.reason,
        )

    def encode(self, prompt: str | list[int], chat: bool = False) -> list[int]:
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        if chat:
            messages = [{"role": "user", "content": prompt}]
            enc = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=True
            )
            return list(enc["input_ids"])
        return list(self.tokenizer.encode(prompt))

    def generate(
        self,
        prompts: str | list[int] | list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        chat: bool = False,
        adapter: str | list[str | None] | None = None,
    ) -> list[RequestOutput]:
        """adapter: the LoRA adapter (a name in the `lora` option's adapters) every prompt runs under,
        or one per prompt; None: the base model."""
        if self.closed:
            raise RuntimeError("this LLM is closed; make a new one to generate")
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        plist = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        names = adapter if isinstance(adapter, list) else [adapter] * len(prompts)
        refs = [self.core.lora.ref(name) if name is not None else None for name in names]
        reqs = [
            GenerateRequest(self.encode(prompt, chat), p, RequestOptions(adapter=ref))
            for prompt, p, ref in zip(prompts, plist, refs, strict=True)
        ]
        if not reqs:
            return []
        if self.fit_to_requests:
            self._fit_kv_cache(reqs)
        for req in reqs:  # every request is refused, or none is queued
            self.core.check(req)
        procs = {
            r.request_id: OutputProcessor(self.tokenizer, str(r.request_id), r.prompt_token_ids, r.params) for r in reqs
        }
        try:
            for req in reqs:
                self.core.add_request(req)
            while self.core.has_unfinished():
                for d in self.core.step():
                    proc = procs[d.request_id]
                    proc.process(d)
                    if proc.stopped_by_string(d.index) and d.finish_reason is None:
                        self.core.abort(d.request_id, d.index)
        except BaseException:  # Ctrl-C or a bug: leave no request behind for the next call
            for rid in procs:
                self.core.abort(rid)
            raise
        return [procs[r.request_id].output for r in reqs]

    # ---- pooling engines (docs/pooling.md) ----------------------------------------------------------
    def embed(self, texts: str | list[str] | list[list[int]], dimensions: int | None = None) -> list[list[float]]:
        """Each text's (or token list's) embedding, as /v1/embeddings returns it: `dimensions` keeps the
        leading ones, renormalized (an embedder built with normalization only)."""
        config = self._pooling("embed", "embed")
        items = [texts] if isinstance(texts, str) else texts
        vectors = self._pool([text_ids(self.tokenizer, x, None) if isinstance(x, str) else list(x) for x in items])
        if dimensions is None or dimensions == config.dimensions:
            return vectors
        if dimensions > config.dimensions or not config.normalize:
            raise UserError(
                f"dimensions is {dimensions}; this model gives {config.dimensions} (fewer only where it normalizes)"
            )
        cut = [v[:dimensions] for v in vectors]  # Matryoshka: the leading dimensions, unit length again
        return [[x / max(math.sqrt(sum(y * y for y in v)), 1e-12) for x in v] for v in cut]

    def classify(self, texts: str | list[str]) -> list[Classification]:
        """Each text's label and probabilities (a softmax over the labels; a sigmoid for one), as /classify."""
        config = self._pooling("classify", "classify", "rerank")
        items = [texts] if isinstance(texts, str) else texts
        out = []
        for logits in self._pool([text_ids(self.tokenizer, t, None) for t in items]):
            probs = probabilities(config, logits)
            out.append(Classification(config.labels[max(range(len(probs)), key=probs.__getitem__)], probs))
        return out

    def score(self, text_1: str | list[str], text_2: str | list[str]) -> list[float]:
        """text_1 against each text_2 (one to many, or pairwise), as /v1/score: a reranker's or a
        cross-encoder's relevance in [0, 1], an embedder's cosine similarity."""
        config = self._pooling("score", "embed", "classify", "rerank")
        left = [text_1] if isinstance(text_1, str) else list(text_1)
        right = [text_2] if isinstance(text_2, str) else list(text_2)
        left = left * len(right) if len(left) == 1 else left
        if len(left) != len(right):
            raise UserError(f"text_1 has {len(left)} texts and text_2 {len(right)}; give one, or as many as text_2")
        if config.task == "embed":
            vectors = self._pool([text_ids(self.tokenizer, t, None) for t in left + right])
            return [cosine(a, b) for a, b in zip(vectors[: len(left)], vectors[len(left) :], strict=True)]
        if not config.scores:
            raise UserError(f"this classifier has {config.dimensions} labels; score needs one (a cross-encoder)")
        prompts = [pair_ids(self.tokenizer, config, q, d, None) for q, d in zip(left, right, strict=True)]
        return [probabilities(config, v)[0] for v in self._pool(prompts)]

    def _pooling(self, what: str, *tasks: str) -> PoolingConfig:
        config = self.engine.manifest.pooling
        if config is None or config.task not in tasks:
            have = "an LLM" if config is None else config.describe()
            raise UserError(f"{what} needs a pooling engine of task {' or '.join(tasks)}; this one is {have}")
        return config

    def _pool(self, prompts: list[list[int]]) -> list[list[float]]:
        """Each prompt's pooled output, all submitted at once and batched by the scheduler."""
        if self.closed:
            raise RuntimeError("this LLM is closed; make a new one")
        task = self.engine.manifest.pooling.task
        reqs = [GenerateRequest(p, _PREFILL_ONLY, RequestOptions(pooling=task)) for p in prompts]
        if self.fit_to_requests:
            self._fit_kv_cache(reqs)
        for req in reqs:
            self.core.check(req)
        out: dict = {}
        try:
            for req in reqs:
                self.core.add_request(req)
            while self.core.has_unfinished():
                for d in self.core.step():
                    if d.error is not None:
                        raise RuntimeError(f"the engine failed a pooling request: {d.error}")
                    if d.pooled is not None:
                        out[d.request_id] = d.pooled
        except BaseException:
            for r in reqs:
                self.core.abort(r.request_id)
            raise
        return [out[r.request_id] for r in reqs]
