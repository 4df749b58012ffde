"""The torch engine's step loop, synchronous: schedule -> run -> sample -> update.

Single-threaded by design; the async backend (backends/torch_engine.py) drives it from its own
thread. A request of n sequences is tracked as a group keyed by the caller's request id.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time

import psutil
import torch

from trtserve.backends.base import EngineStats, GenerateRequest, TokenDelta
from trtserve.errors import UserError
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.config import RuntimeConfig
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.request import Request
from trtserve.runtime.runner import ModelRunner, StepLogits
from trtserve.runtime.sampler import SampleRow, logprobs_of, sample
from trtserve.runtime.scheduler import Scheduler, SchedulerConfig

log = logging.getLogger(__name__)


def size_kv_cache(engine: LoadedEngine, cfg: RuntimeConfig, max_batch_size: int) -> int:
    """Number of KV blocks: from the byte budget, else a fraction of available memory, never more
    than max_batch_size full-length sequences need."""
    m, b = engine.config.pretrained_config, engine.config.build_config
    bs = b.plugin_config.tokens_per_block
    per_block = m.kv_bytes_per_token() * bs
    per_seq = -(-b.max_seq_len // bs)
    if cfg.kv_cache_memory is not None:
        blocks = int(cfg.kv_cache_memory) // per_block
    else:
        dev = engine.model.device
        free = torch.cuda.mem_get_info(dev)[0] if dev.type == "cuda" else psutil.virtual_memory().available
        blocks = min(int(free * cfg.kv_cache_free_memory_fraction) // per_block, max_batch_size * per_seq)
    if blocks < 1:
        raise UserError(f"the KV cache budget holds no block of {per_block} bytes; raise kv_cache_memory")
    log.info(
        "KV cache: %d blocks of %d tokens = %d tokens (%.1f MiB); %d full-length sequences of %d tokens fit",
        blocks,
        bs,
        blocks * bs,
        blocks * per_block / 2**20,
        blocks // per_seq,
        b.max_seq_len,
    )
    return blocks


def engine_fingerprint(engine: LoadedEngine) -> str:
    files = sorted((k, v.sha256) for k, v in engine.manifest.files.items())
    return hashlib.sha256(repr(files).encode()).hexdigest()


class EngineCore:
    def __init__(self, engine: LoadedEngine, cfg: RuntimeConfig | None = None):
        cfg = cfg or RuntimeConfig()
        b = engine.config.build_config
        self.engine = engine
        self.max_seq_len = b.max_seq_len
        self.sched_config = SchedulerConfig(
            max_num_tokens=min(cfg.max_num_tokens or b.max_num_tokens, b.max_num_tokens),
            max_batch_size=min(cfg.max_batch_size or b.max_batch_size, b.max_batch_size),
            max_seq_len=b.max_seq_len,
            policy=cfg.capacity_policy,
        )
        num_blocks = size_kv_cache(engine, cfg, self.sched_config.max_batch_size)
        bs = b.plugin_config.tokens_per_block
        self.blocks = BlockManager(num_blocks, bs, engine_fingerprint(engine), cfg.enable_prefix_caching)
        self.scheduler = Scheduler(self.sched_config, self.blocks)
        self.runner = ModelRunner(engine.model, engine.model.new_kv_cache(num_blocks, bs), self.blocks)
        self.groups: dict[str, list[Request]] = {}
        self._arrival = itertools.count()
        self._pending_copies: list[tuple[int, int]] = []  # KV block copies owed to forked sequences
        self._prompt_acc: dict[str, list] = {}  # request id -> prompt logprobs gathered so far
        self.steps = self.prompt_tokens = self.generated_tokens = 0

    # ---- requests --------------------------------------------------------------------------
    def check(self, req: GenerateRequest) -> None:
        """Raise UserError if the request can never run on this engine."""
        n = len(req.prompt_token_ids)
        if n == 0:
            raise UserError("the prompt is empty; send at least one token")
        if n + req.params.max_tokens > self.max_seq_len:
            raise UserError(
                f"the prompt ({n} tokens) plus max_tokens ({req.params.max_tokens}) exceeds the engine's max_seq_len "
                f"({self.max_seq_len}); shorten the prompt or lower max_tokens"
            )
        vocab = self.engine.config.pretrained_config.vocab_size
        if any(t < 0 or t >= vocab for t in req.prompt_token_ids):
            raise UserError(f"prompt token ids must lie in [0, {vocab})")
        blocks_needed = req.params.n * self.blocks.blocks_for(n + req.params.max_tokens)
        if blocks_needed > self.blocks.num_blocks:
            raise UserError(
                f"the request needs {blocks_needed} KV blocks but the cache has {self.blocks.num_blocks}; "
                "lower max_tokens or n, or give the server a larger kv_cache_memory"
            )
        if req.params.n > self.sched_config.max_batch_size:
            raise UserError(
                f"n ({req.params.n}) exceeds the engine's max_batch_size ({self.sched_config.max_batch_size})"
            )

    def add_request(self, req: GenerateRequest) -> None:
        self.check(req)
        if req.request_id in self.groups:
            raise UserError(f"request id {req.request_id!r} is already in use")
        r = Request(
            req.request_id, list(req.prompt_token_ids), req.params, next(self._arrival), req.priority, req.cache_salt
        )
        r.arrival_time = time.monotonic()
        r.make_generator()
        self.groups[req.request_id] = [r]
        self.scheduler.add(r)

    def abort(self, request_id: str) -> list[TokenDelta]:
        """Finish every sequence of the request now; its blocks are free when this returns."""
        deltas = []
        for r in self.groups.pop(request_id, []):
            if not r.is_finished:
                self.scheduler.finish(r, "abort")
                deltas.append(self._delta(r, [], None))
        return deltas

    def abort_sequence(self, request_id: str, index: int) -> list[TokenDelta]:
        """Finish one sequence of a request (its stop string matched); the others go on."""
        deltas = []
        for r in self.groups.get(request_id, []):
            if r.index == index and not r.is_finished:
                self.scheduler.finish(r, "abort")
                self._drop_if_done(r)
                deltas.append(self._delta(r, [], None))
        return deltas

    def has_unfinished(self) -> bool:
        return self.scheduler.num_unfinished > 0

    # ---- the step --------------------------------------------------------------------------
    def step(self) -> list[TokenDelta]:
        out = self.scheduler.schedule()
        if not out.chunks:
            return []
        self.steps += 1
        try:
            self.runner.kv.copy_blocks(self._pending_copies)
            self._pending_copies = []
            logits = self.runner.execute(out)
        except Exception as err:  # a failed step fails the requests it touched, not the engine
            log.exception("engine step failed")
            return [d for c in out.chunks for d in self._fail(c.request, err)]
        deltas: list[TokenDelta] = []
        sampling = []
        for c in out.chunks:
            r = c.request
            if r.num_computed_tokens < r.num_prompt_tokens:
                self.prompt_tokens += min(c.num_new_tokens, r.num_prompt_tokens - r.num_computed_tokens)
            r.num_computed_tokens += c.num_new_tokens
            self.blocks.commit(r.request_id, r.all_token_ids, r.num_computed_tokens)
            if r.request_id in logits.sample_row:
                sampling.append(r)
        prompt_lps = self._prompt_logprobs(out, logits)
        try:
            tokens, lps = self._sample(sampling, logits)
        except Exception as err:
            log.exception("sampling failed")
            return [d for r in sampling for d in self._fail(r, err)]
        for r, tok, lp in zip(sampling, tokens, lps, strict=True):
            children = self._fork(r, logits) if r.params.n > 1 and not r.forked else []
            deltas.append(self._emit(r, tok, lp, prompt_lps.get(r.request_id)))
            for child, (ctok, clp) in children:
                deltas.append(self._emit(child, ctok, clp, None))
        return deltas

    def _sample(self, reqs: list[Request], logits: StepLogits):
        if not reqs:
            return [], []
        rows = logits.logits[[logits.sample_row[r.request_id] for r in reqs]]  # (S, vocab)
        return sample(rows, [self._row(r) for r in reqs])

    def _row(self, r: Request) -> SampleRow:
        banned = list(r.params.stop_token_ids) + ([] if r.params.ignore_eos else sorted(self.engine.eos_token_ids))
        return SampleRow(r.params, r.prompt_token_ids, r.output_token_ids, r.generator, banned)

    def _prompt_logprobs(self, out, logits: StepLogits) -> dict[str, list]:
        """Accumulate prompt logprobs across chunks; returns those completed this step."""
        done = {}
        for c in out.chunks:
            r = c.request
            if r.request_id in logits.prompt_rows:
                first, pos = logits.prompt_rows[r.request_id]
                last = min(r.num_computed_tokens - 1, r.num_prompt_tokens - 2)
                logp = torch.log_softmax(logits.logits[first : first + last - pos + 1], dim=-1)
                acc = self._prompt_acc.setdefault(r.request_id, [None])
                for j, p in enumerate(range(pos, last + 1)):
                    acc.append(logprobs_of(logp[j], r.prompt_token_ids[p + 1], r.params.prompt_logprobs or 0))
            if (
                r.params.prompt_logprobs is not None
                and not r.prompt_logprobs_done
                and r.num_computed_tokens >= r.num_prompt_tokens
            ):
                r.prompt_logprobs_done = True
                done[r.request_id] = self._prompt_acc.pop(r.request_id, [None])
        return done

    def _fork(self, parent: Request, logits: StepLogits) -> list[tuple[Request, tuple[int, object]]]:
        """Split a request of n sequences after its prompt: children share the prompt's blocks."""
        parent.forked = True
        children = []
        for i in range(1, parent.params.n):
            child = Request(
                f"{parent.request_id}#{i}",
                parent.prompt_token_ids,
                parent.params.model_copy(update={"n": 1}),
                parent.arrival,
                parent.priority,
                parent.cache_salt,
                index=i,
                num_computed_tokens=parent.num_computed_tokens,
                num_cached_tokens=parent.num_cached_tokens,
                prompt_logprobs_done=True,
            )
            child.make_generator()
            self._pending_copies += self.blocks.fork(parent.request_id, child.request_id, parent.num_computed_tokens)
            self.scheduler.add_running(child)
            self.groups[parent.request_id].append(child)
            row = logits.logits[[logits.sample_row[parent.request_id]]]
            tok, lp = sample(row, [self._row(child)])
            children.append((child, (tok[0], lp[0])))
        return children

    def _emit(self, r: Request, token: int, lp, prompt_lps) -> TokenDelta:
        r.output_token_ids.append(token)
        self.generated_tokens += 1
        p = r.params
        finish = None
        if token in p.stop_token_ids:
            finish, r.stop_reason = "stop", token
        elif not p.ignore_eos and token in self.engine.eos_token_ids:
            finish = "stop"
        elif len(r.output_token_ids) >= p.max_tokens or r.num_tokens >= self.max_seq_len:
            finish = "length"
        if finish:
            self.scheduler.finish(r, finish)
            self._drop_if_done(r)
        return self._delta(r, [token], [lp] if lp is not None else None, prompt_lps)

    def _fail(self, r: Request, err: Exception) -> list[TokenDelta]:
        self.scheduler.finish(r, "error")
        self._drop_if_done(r)
        d = self._delta(r, [], None)
        d.error = f"{type(err).__name__}: {err}"
        return [d]

    def _drop_if_done(self, r: Request) -> None:
        # A parent forks before its first token is emitted, so a group whose members have all
        # finished will never grow again.
        group_id = r.request_id.split("#", 1)[0]
        if all(x.is_finished for x in self.groups.get(group_id, [])):
            self.groups.pop(group_id, None)

    def _delta(self, r: Request, tokens, lps, prompt_lps=None) -> TokenDelta:
        first = len(r.output_token_ids) == len(tokens)
        queued = (r.scheduled_time or time.monotonic()) - r.arrival_time if first else None
        return TokenDelta(
            request_id=r.request_id.split("#", 1)[0],
            index=r.index,
            token_ids=tokens,
            logprobs=lps,
            prompt_logprobs=prompt_lps,
            finish_reason=r.finish_reason if r.is_finished else None,
            stop_reason=r.stop_reason,
            num_prompt_tokens=r.num_prompt_tokens,
            num_cached_tokens=r.num_cached_tokens,
            queue_time=queued,
        )

    # ---- stats -----------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        s = self.blocks.stats()
        return EngineStats(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_blocks_total=s.num_blocks,
            kv_blocks_used=s.used,
            kv_blocks_free=s.free,
            kv_blocks_cached=s.cached,
            kv_utilization=s.utilization,
            kv_waste=s.waste,
            prefix_queries=s.prefix_queries,
            prefix_hits=s.prefix_hits,
            preemptions=self.scheduler.num_preemptions,
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            steps=self.steps,
        )
