"""The torch engine's step loop, synchronous: schedule -> run -> sample -> emit.

Single-threaded by design; the async backend (backends/torch_engine.py) drives it from its own
thread. A request of n sequences is tracked as a group keyed by its RequestId; each sequence is a
Request keyed by its SequenceId. Optional parts (LoRA, speculation, the KV second tier, KV hand-off)
attach through the step hooks of runtime/features/, as null objects when off.
"""

from __future__ import annotations

import itertools
import logging
import time
import weakref

import torch

from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.kv_cache_events import KVCacheListener
from trtserve.engine.manifest import engine_fingerprint
from trtserve.engine.messages import GenerateRequest, TokenDelta
from trtserve.engine.rules import check_request, finish_reason
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.stats import EngineStats, KVCacheStats, PrefixCacheStats
from trtserve.models import host_memory
from trtserve.runtime import weights
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.features import Features
from trtserve.runtime.features.handoff import KVHandoff, holds_kv
from trtserve.runtime.features.kv_tier import NoTier, Tier
from trtserve.runtime.features.lora import make_lora
from trtserve.runtime.features.pooling import NoPooling, Pooling
from trtserve.runtime.features.speculation import NoSpeculation, Speculation
from trtserve.runtime.features.thinking import ThinkingBudget
from trtserve.runtime.features.timeline import StepTimeline
from trtserve.runtime.features.vision import model_features
from trtserve.runtime.grammar_queue import GrammarQueue
from trtserve.runtime.guided import Grammars
from trtserve.runtime.kv_export import contract_listener
from trtserve.runtime.kv_tier import KVTier
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.request import Request
from trtserve.runtime.runner import ModelRunner, StepLogits
from trtserve.runtime.sampler import row_for, sample
from trtserve.runtime.schedule import ScheduledChunk, SchedulerOutput
from trtserve.runtime.scheduler import Scheduler
from trtserve.runtime.sizing import scheduler_config, sized_num_blocks
from trtserve.runtime.speculative.speculator import make_speculator

log = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, engine: LoadedEngine, cfg: RuntimeConfig | None = None, num_blocks: int | None = None):
        """num_blocks: the KV cache's size in blocks; None sizes it by `cfg` (size_kv_cache)."""
        cfg = cfg or RuntimeConfig()
        self.engine = engine
        self.max_seq_len = engine.config.build_config.max_seq_len
        self.enable_prefix_caching = cfg.enable_prefix_caching
        self.fingerprint = engine_fingerprint(engine.manifest)
        self.lora = make_lora(engine, cfg.lora)  # the LoRA adapters it serves, loaded and checked now
        self.sched_config = scheduler_config(engine, cfg)
        if num_blocks is None:
            num_blocks = sized_num_blocks(engine, cfg, self.sched_config.max_batch_size)  # logs the plan
        spec = cfg.speculative
        self.speculation = Speculation(make_speculator(spec, engine, cfg)) if spec else NoSpeculation()
        self.tier = Tier(KVTier(cfg.kv_offload, self.fingerprint)) if cfg.kv_offload else NoTier()
        self.handoff = KVHandoff(self.fingerprint)
        self.pooling = Pooling(engine.pooling) if engine.pooling is not None else NoPooling()
        scopes = [*model_features(engine), ThinkingBudget(engine.config.pretrained_config.vocab_size)]
        features = (self.lora, self.speculation, self.tier, self.handoff, self.pooling, StepTimeline())
        self.features = Features(*features, *scopes)
        self.asleep = False  # sleep() released the KV cache
        self._make_kv_cache(num_blocks)
        vocab, eos = engine.config.pretrained_config.vocab_size, sorted(engine.eos_token_ids)
        self.grammars = Grammars(engine.tokenizer, vocab, eos)  # compiled lazily
        self.compiling = GrammarQueue(self.grammars)  # constrained requests waiting for their grammar
        self.groups: dict[RequestId, list[Request]] = {}  # the sequences of each unfinished request
        self._arrival = itertools.count()
        self.steps = self.prompt_tokens = self.generated_tokens = 0

    # ---- the KV cache ------------------------------------------------------------------------
    def _make_kv_cache(self, num_blocks: int) -> None:
        bs = self.engine.config.build_config.plugin_config.tokens_per_block
        self.blocks = BlockManager(num_blocks, bs, self.fingerprint, self.enable_prefix_caching)
        self.scheduler = Scheduler(
            self.sched_config, self.blocks, self.lora, self.speculation, self.pooling, self.engine.vision
        )
        kv = self.engine.model.new_kv_cache(num_blocks, bs)
        self.kv_block_bytes = kv.data.nbytes // num_blocks
        self.features.on_cache(self.blocks, kv)
        self.runner = ModelRunner(self.engine.model, kv, self.blocks, self.lora, self.pooling, self.engine.vision)
        # check()ed requests not yet added; a check against an old cache's size no longer holds
        self._checked: weakref.WeakSet[GenerateRequest] = weakref.WeakSet()

    def _remake_kv_cache(self, num_blocks: int) -> None:
        """A new, empty KV cache; the counters carry on."""
        old_blocks, old_scheduler = self.blocks, self.scheduler
        self._make_kv_cache(num_blocks)
        self.blocks.carry_over(old_blocks)
        self.scheduler.carry_over(old_scheduler)

    def resize_kv_cache(self, num_blocks: int) -> None:
        """An empty KV cache of num_blocks, between requests only: no cached prefix is carried over (no
        lookup may hit a block whose K and V are gone); the counters carry on."""
        if self.has_unfinished():
            raise RuntimeError("the KV cache can only be resized while no request is in flight")
        self._release_kv_cache()
        self._remake_kv_cache(num_blocks)

    def sleep(self) -> None:
        """Release the KV cache (its prefixes to the second tier first) and on CUDA move the weights to host
        memory, between requests; wake_up() undoes it."""
        if self.has_unfinished():
            raise RuntimeError("the engine can only sleep while no request is in flight")
        self._release_kv_cache()
        weights.to_host(self.engine.model)
        self.features.sleep()
        self.asleep = True

    def _release_kv_cache(self) -> None:
        """Drop the KV cache's storage (on CPU, pages back to the system); no request is running."""
        self.features.on_release_cache(self.blocks)
        self.blocks.clear()
        del self.runner  # frees the old storage before a new one is allocated: one cache at a time

    def wake_up(self) -> None:
        """A new, empty KV cache of the same size (the weights back on their device); counters carry on."""
        if not self.asleep:
            return
        weights.to_device(self.engine.model)
        self.features.wake_up()
        self._remake_kv_cache(self.blocks.num_blocks)
        self.asleep = False

    def close(self) -> None:
        """A clean stop: the second tier saves the cached prefixes and writes its index."""
        self.features.close(None if self.asleep else self.blocks)

    # ---- requests --------------------------------------------------------------------------
    def check(self, req: GenerateRequest) -> None:
        """Raise UserError if the request can never run on this engine; add_request does not check again."""
        vocab = self.engine.config.pretrained_config.vocab_size
        check_request(
            req, max_seq_len=self.max_seq_len, vocab_size=vocab, max_batch_size=self.sched_config.max_batch_size
        )
        self.blocks.check_fits(req.params.n, len(req.prompt_token_ids) + req.params.max_tokens)
        if req.params.guided is not None:
            self.grammars.validate(req.params.guided)  # UserError for a spec that does not parse
        self.features.check(req)
        self._checked.add(req)

    def add_request(self, req: GenerateRequest) -> None:
        if req not in self._checked:
            self.check(req)
        self._checked.discard(req)
        if req.request_id in self.groups:
            raise ValueError(f"{req.request_id} was added twice")  # RequestIds are unique: a bug if seen
        r = Request(
            SequenceId(req.request_id), list(req.prompt_token_ids), req.params, next(self._arrival), req.options
        )
        if req.params.prompt_logprobs is not None:  # gathered chunk by chunk
            r.prompt_logprobs = [None] * len(req.prompt_token_ids)
        r.arrival_time = time.monotonic()
        r.make_generator()
        self.groups[req.request_id] = [r]
        self.features.on_add(r)
        if req.params.guided is None:
            self.scheduler.add(r)
        else:  # joins the queue when its grammar is compiled (at once if cached): see _admit_compiled
            self.compiling.submit(r, req.params.guided)

    def abort(self, request_id: RequestId, index: int | None = None) -> list[TokenDelta]:
        """Finish every sequence of the request (or only `index`) now; their blocks are free on return."""
        deltas = []
        for r in list(self.groups.get(request_id, [])):
            if (index is None or r.index == index) and not r.is_finished:
                self.scheduler.finish(r, "abort")
                deltas.append(r.delta([], None))
        self._drop_if_done(request_id)
        return deltas

    def invalidate_cache(self, namespace: str | None, before_version: int | None = None) -> int:
        """Drop the namespace's cached prefixes (block_manager.py: invalidate); running requests keep theirs."""
        self.features.invalidate(namespace, before_version)
        return self.blocks.invalidate(namespace, before_version)

    def subscribe_kv_events(self, listener: KVCacheListener):
        """Hand `listener` the contract's prefix-cache events; returns the block manager's listener."""
        converted = contract_listener(listener)
        self.blocks.subscribe(converted)
        return converted

    def has_unfinished(self) -> bool:
        return self.scheduler.num_unfinished > 0 or len(self.compiling) > 0

    def idle(self, nbytes: int = host_memory.PIECE) -> bool:
        """What an engine without requests does, a piece at a time (nbytes of the weights onto huge pages): never
        beside a step, where it slowed steps up to 17x. Whether any remains."""
        return host_memory.collapse_next(nbytes)

    # ---- the step --------------------------------------------------------------------------
    def step(self) -> list[TokenDelta]:
        start = time.perf_counter()
        self.features.tick()
        deltas = self._step()
        self.speculation.step_ended(time.perf_counter() - start)
        return deltas

    def _step(self) -> list[TokenDelta]:
        ready, failed_compiles = self.compiling.poll(wait_if_idle=not self.scheduler.num_unfinished)
        for r in ready:
            self.scheduler.add(r)
        if failed_compiles:
            return [d for r, err in failed_compiles for d in self._fail(r, err)]
        out = self.scheduler.schedule()
        self.speculation.scheduled(out)
        failed = [d for r, err in out.failed for d in self._failed(r, err)]  # adapters that would not load
        if not out.chunks:
            return failed
        self.features.before_run(out, self.runner.kv, self.blocks)
        self.steps += 1
        try:
            logits = self.runner.execute(out)
        except Exception as err:  # a failed step fails the requests it touched, not the engine
            log.exception("engine step failed")
            return failed + [d for c in out.chunks for d in self._fail(c.request, err)]
        self.prompt_tokens += self.scheduler.update(out)
        self.features.after_run(out)
        return failed + self._sample_and_emit(out, logits)

    def _sample_and_emit(self, out: SchedulerOutput, logits: StepLogits) -> list[TokenDelta]:
        """Each chunk that reaches its sequence's end picks (or verifies) its next tokens and emits them."""
        prompt_lps = logits.prompt_logprobs(out)
        chunks = list(zip(out.chunks, logits.sample_row, strict=True))
        sampling = [(c.request, row) for c, row in chunks if row is not None and not c.draft]
        verifying = [(c, row) for c, row in chunks if c.draft]
        eos = self.engine.eos_token_ids
        try:
            rows = [row_for(r, eos) for r, _ in sampling]
            tokens, lps = sample(_take_rows(logits.logits, [row for _, row in sampling]), rows) if rows else ([], [])
        except Exception as err:
            log.exception("sampling failed")
            return [d for r, _ in sampling for d in self._fail(r, err)]
        deltas: list[TokenDelta] = []
        for c, row in verifying:
            try:
                deltas.append(
                    self._verify(c, logits.logits[row : row + 1 + len(c.draft)], prompt_lps.get(c.request.seq))
                )
            except Exception as err:
                log.exception("verification failed")
                deltas += self._fail(c.request, err)
        for (r, row), tok, lp in zip(sampling, tokens, lps, strict=True):
            children = self._fork(r, logits.logits[[row]]) if r.params.n > 1 and not r.forked else []
            deltas.append(self._emit(r, [tok], [lp], prompt_lps.get(r.seq)))
            for child, (ctok, clp) in children:
                deltas.append(self._emit(child, [ctok], [clp], None))
        for c, hidden in zip(out.chunks, logits.pooled, strict=False):
            if hidden is not None:
                deltas += self._pool(c, hidden)
        return deltas

    def _pool(self, c: ScheduledChunk, hidden: torch.Tensor) -> list[TokenDelta]:
        """Fold a pooling chunk's rows in; its prompt done, its one delta carries the head's output."""
        r = c.request
        try:
            pooled = self.pooling.take(c, hidden)
        except Exception as err:
            log.exception("pooling failed")
            return self._fail(r, err)
        if pooled is None:
            return []
        self.scheduler.finish(r, "stop")
        delta = r.delta([], None)
        delta.pooled = pooled
        return [self._finished(r, delta)]

    def _verify(self, c: ScheduledChunk, rows: torch.Tensor, prompt_lps) -> TokenDelta:
        """Emit the proposals the target kept and its next token (rows: (1 + len(draft), vocab))."""
        verdict = self.speculation.verify(c, rows, self.engine.eos_token_ids)
        self.scheduler.settle(c.request, c.draft[: verdict.accepted])
        return self._emit(c.request, verdict.tokens, verdict.logprobs, prompt_lps, (len(c.draft), verdict.accepted))

    def _fork(self, parent: Request, row: torch.Tensor) -> list[tuple[Request, tuple[int, object]]]:
        """Split a request of n sequences after its prompt: children share the prompt's blocks and options.
        row: (1, vocab) the parent's sampling logits, which each child samples on its own."""
        children = []
        for i in range(1, parent.params.n):
            seq, params = SequenceId(parent.seq.request, i), parent.params.model_copy(update={"n": 1})
            child = Request(seq, parent.prompt_token_ids, params, parent.arrival, parent.options)
            child.rope_long = parent.rope_long
            # its queue time is the parent's (it never waited on its own): from 0 it read as hours
            child.arrival_time, child.scheduled_time = parent.arrival_time, parent.scheduled_time
            child.make_generator()
            if parent.params.guided is not None:  # the parent has accepted nothing yet: a fresh matcher
                child.guided = self.grammars.new_state(parent.params.guided, parent.options.thinking_span)
            self.scheduler.fork(parent, child)
            self.groups[parent.seq.request].append(child)
            tok, lp = sample(row, [row_for(child, self.engine.eos_token_ids)])
            children.append((child, (tok[0], lp[0])))
        return children

    def _emit(self, r: Request, tokens: list[int], lps: list, prompt_lps, verified=None) -> TokenDelta:
        """Append tokens to the output until one finishes the sequence (the rest are dropped).
        verified: (proposed, accepted) when the tokens come from a verification (counted as emitted)."""
        kept = []
        for token in tokens:
            kept.append(token)
            r.output_token_ids.append(token)
            self.generated_tokens += 1
            self.features.on_token(r)
            finish, r.stop_reason = finish_reason(
                token, len(r.output_token_ids), r.num_tokens, r.params, self.engine.eos_token_ids, self.max_seq_len
            )
            if r.guided is not None and r.guided.accept(token) and r.guided.is_terminated and not finish:
                finish = "stop"  # the grammar is complete (its stop token was emitted though ignore_eos is set)
            if finish:
                self.scheduler.finish(r, finish, keep_blocks=holds_kv(r))
                break
        if verified is not None:  # proposals after a token that finished the sequence were not used
            self.features.on_verified(r, verified[0], min(verified[1], len(kept)))
        kept_lps = lps[: len(kept)] if lps and lps[0] is not None else None
        delta = r.delta(kept, kept_lps, prompt_lps)
        return self._finished(r, delta) if r.is_finished else delta

    def _finished(self, r: Request, delta: TokenDelta) -> TokenDelta:
        """The last delta of a sequence that finished by its output: the features see it, the group may go."""
        self.features.on_finish(r, delta)
        self._drop_if_done(r.seq.request)
        return delta

    def _fail(self, r: Request, err: Exception) -> list[TokenDelta]:
        self.scheduler.finish(r, "error")
        return self._failed(r, err)

    def _failed(self, r: Request, err: Exception) -> list[TokenDelta]:
        """The error delta of a request the scheduler has finished."""
        self._drop_if_done(r.seq.request)
        d = r.delta([], None)
        d.error = f"{type(err).__name__}: {err}"
        return [d]

    def _drop_if_done(self, request_id: RequestId) -> None:
        # A parent forks before its first token is emitted, so a group whose members have all
        # finished will never grow again.
        if all(x.is_finished for x in self.groups.get(request_id, [])):
            group = self.groups.pop(request_id, None)
            if group:
                self.features.on_request_done(group[0])

    # ---- stats -----------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        s, sched = self.blocks.stats(), self.scheduler
        return EngineStats(
            sched.stats(steps=self.steps, prompt_tokens=self.prompt_tokens, generated_tokens=self.generated_tokens),
            KVCacheStats(s.num_blocks, s.used, s.free, s.cached, s.utilization, s.waste, self.kv_block_bytes),
            PrefixCacheStats(s.prefix_queries, s.prefix_hits, s.invalidations, s.version_refusals, s.by_namespace),
            self.speculation.stats(),
            self.lora.stats(),
            self.tier.stats(),
            self.engine.vision.stats(),
        )


def _take_rows(t: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """t[rows]: a view where the rows run in order (a decode step's: every row), else a copy (32 rows of a
    49k vocabulary are a 6 MB copy, ~1 ms of a decode step on 2 CPU cores)."""
    if rows and rows == list(range(rows[0], rows[0] + len(rows))):
        return t[rows[0] : rows[0] + len(rows)]
    return t[rows]
