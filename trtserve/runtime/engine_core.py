"""The torch engine's step loop, synchronous: schedule -> run -> sample -> update.

Single-threaded by design; the async backend (backends/torch_engine.py) drives it from its own
thread. A request of n sequences is tracked as a group keyed by its RequestId; each sequence is a
Request keyed by its SequenceId.
"""

from __future__ import annotations

import itertools
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

import torch

from trtserve.engine.adapters import AdapterRef, LoraConfig
from trtserve.engine.errors import UnsupportedError, UserError
from trtserve.engine.kv_cache_events import KVCacheListener
from trtserve.engine.kv_transfer import KVHandle, KVHold, KVImport, KVPayload
from trtserve.engine.layout import LORA_DIR
from trtserve.engine.manifest import engine_fingerprint as manifest_fingerprint
from trtserve.engine.messages import EngineStats, GenerateRequest, RequestId, SequenceId, SpecCounts, TokenDelta
from trtserve.engine.rules import check_request, finish_reason
from trtserve.engine.run_config import RuntimeConfig
from trtserve.runtime import weights
from trtserve.runtime.adapters import Adapters
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.guided import Grammars
from trtserve.runtime.kv_export import KVHolds, check_import, contract_listener, import_blocks
from trtserve.runtime.kv_tier import KVTier
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.request import Request
from trtserve.runtime.runner import ModelRunner, StepLogits
from trtserve.runtime.sampler import SampleRow, logprobs_of, sample
from trtserve.runtime.scheduler import ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput
from trtserve.runtime.sizing import default_step_tokens, size_kv_cache
from trtserve.runtime.speculative.speculator import Speculator, make_speculator
from trtserve.runtime.speculative.verify import verify

log = logging.getLogger(__name__)


def engine_fingerprint(engine: LoadedEngine) -> str:
    return manifest_fingerprint(engine.manifest)


class EngineCore:
    def __init__(self, engine: LoadedEngine, cfg: RuntimeConfig | None = None, num_blocks: int | None = None):
        """num_blocks: the KV cache's size in blocks; None sizes it by `cfg` (size_kv_cache)."""
        cfg = cfg or RuntimeConfig()
        b = engine.config.build_config
        self.engine = engine
        self.max_seq_len = b.max_seq_len
        self.enable_prefix_caching = cfg.enable_prefix_caching
        # The LoRA adapters it serves (the engine dir's and the `lora` engine option's), loaded and checked
        # now; None: none. An engine dir that packs adapters serves them without the option.
        packed = engine.path / LORA_DIR
        packed = {p.name: p for p in sorted(packed.iterdir()) if p.is_dir()} if packed.is_dir() else {}
        lora = cfg.lora or (LoraConfig() if packed else None)
        self.adapters = Adapters(lora, engine.model, packed) if lora is not None else None
        self.sched_config = SchedulerConfig(
            max_num_tokens=min(cfg.max_num_tokens or default_step_tokens(engine), b.max_num_tokens),
            max_batch_size=b.batch_limit(cfg.max_batch_size),
            max_seq_len=b.max_seq_len,
            policy=cfg.capacity_policy,
        )
        if num_blocks is None:
            size = size_kv_cache(engine, cfg, self.sched_config.max_batch_size)
            log.info("%s", size.describe())
            num_blocks = size.num_blocks
        # speculative decoding (the `speculative` engine option); None: off
        self.speculator: Speculator | None = make_speculator(cfg.speculative, engine, cfg) if cfg.speculative else None
        # the prefix cache's second tier (the `kv_offload` option), attached to each cache made; None: none
        self.kv_tier = KVTier(cfg.kv_offload, engine_fingerprint(engine)) if cfg.kv_offload else None
        self.asleep = False  # sleep() released the KV cache
        self._make_kv_cache(num_blocks)
        vocab = engine.config.pretrained_config.vocab_size
        self.grammars = Grammars(engine.tokenizer, vocab, sorted(engine.eos_token_ids))  # compiled lazily
        self._compiling: list[tuple[Request, Future]] = []  # constrained requests waiting for their grammar
        self.groups: dict[RequestId, list[Request]] = {}  # the sequences of each unfinished request
        self._arrival = itertools.count()
        self._decode_only: tuple[int, int] | None = None  # this step's (batch, proposals) if it ran decodes only
        self.steps = self.prompt_tokens = self.generated_tokens = 0

    def _make_kv_cache(self, num_blocks: int) -> None:
        bs = self.engine.config.build_config.plugin_config.tokens_per_block
        fingerprint = engine_fingerprint(self.engine)
        self.blocks = BlockManager(num_blocks, bs, fingerprint, self.enable_prefix_caching)
        self.holds = KVHolds(self.blocks)  # finished prefills' prompt KV, kept for export (disaggregation)
        lora = self.adapters.cache if self.adapters is not None else None
        self.scheduler = Scheduler(self.sched_config, self.blocks, lora, self.speculator)
        kv = self.engine.model.new_kv_cache(num_blocks, bs)
        self.kv_block_bytes = kv.data.nbytes // num_blocks
        if self.kv_tier is not None:
            self.kv_tier.attach(self.blocks, kv)
        self.runner = ModelRunner(self.engine.model, kv, self.blocks, lora)

    def resize_kv_cache(self, num_blocks: int) -> None:
        """Replace the KV cache by an empty one of num_blocks, between requests only.

        The new cache starts with no cached prefix (the old blocks' contents are not carried over),
        so no lookup can hit a block whose K and V are gone; the counters carry on.
        """
        if self.has_unfinished():
            raise RuntimeError("the KV cache can only be resized while no request is in flight")
        old_blocks, preemptions = self.blocks, self.scheduler.num_preemptions
        self._release_kv_cache()
        self._make_kv_cache(num_blocks)
        self.blocks.carry_over(old_blocks)
        self.scheduler.num_preemptions = preemptions

    def sleep(self) -> None:
        """Release the KV cache (and on CUDA move the weights to host memory) between requests; its
        cached prefixes go to the second tier first, if there is one. wake_up() undoes it."""
        if self.has_unfinished():
            raise RuntimeError("the engine can only sleep while no request is in flight")
        self._release_kv_cache()
        weights.to_host(self.engine.model)
        if self.speculator is not None:
            self.speculator.sleep()  # a draft model's KV cache and weights too
        self.asleep = True

    def _release_kv_cache(self) -> None:
        """Drop the KV cache's storage (on CPU its pages go back to the system), its cached prefixes saved
        in the second tier first, if there is one; running requests must be none."""
        if self.kv_tier is not None:
            self.kv_tier.save(self.blocks)
            self.kv_tier.detach()  # it holds no reference to the old storage
        self.holds.release_all()
        self.blocks.clear()
        del self.runner  # frees the old storage before a new one is allocated: one cache at a time

    def wake_up(self) -> None:
        """A new, empty KV cache of the same size (the weights back on their device); counters carry on."""
        if not self.asleep:
            return
        weights.to_device(self.engine.model)
        if self.speculator is not None:
            self.speculator.wake_up()
        old_blocks, preemptions = self.blocks, self.scheduler.num_preemptions
        self._make_kv_cache(old_blocks.num_blocks)
        self.blocks.carry_over(old_blocks)
        self.scheduler.num_preemptions = preemptions
        self.asleep = False

    def close(self) -> None:
        """A clean stop: the second tier saves the cached prefixes and writes its index."""
        if self.kv_tier is not None:
            self.kv_tier.close(None if self.asleep else self.blocks)

    # ---- requests --------------------------------------------------------------------------
    def check(self, req: GenerateRequest) -> None:
        """Raise UserError if the request can never run on this engine."""
        vocab = self.engine.config.pretrained_config.vocab_size
        check_request(
            req, max_seq_len=self.max_seq_len, vocab_size=vocab, max_batch_size=self.sched_config.max_batch_size
        )
        n = len(req.prompt_token_ids)
        blocks_needed = req.params.n * self.blocks.blocks_for(n + req.params.max_tokens)
        if blocks_needed > self.blocks.num_blocks:
            raise UserError(
                f"the request needs {blocks_needed} KV blocks but the cache has {self.blocks.num_blocks}; "
                "lower max_tokens or n, or give the server a larger kv_cache_memory"
            )
        if req.params.guided is not None:
            self.grammars.validate(req.params.guided)  # UserError for a spec that does not parse
        if req.kv_transfer is not None:
            self._check_kv_transfer(req)
        if req.adapter is not None:
            if self.adapters is None:
                raise UserError(
                    f"this engine serves no LoRA adapters (asked for {req.adapter.name}); "
                    "start it with the `lora` engine option, or send the request to the base model"
                )
            self.adapters.check(req.adapter)

    def adapter(self, name: str) -> AdapterRef:
        """The served LoRA adapter named `name`; UserError if there is none."""
        return self._lora(name).ref(name)

    def load_adapter(self, name: str, path: str | Path) -> AdapterRef:
        """Serve (or replace) adapter `name` from `path`, between steps (runtime/adapters.py: add)."""
        return self._lora(name).add(name, path)

    def unload_adapter(self, name: str) -> None:
        self._lora(name).remove(name)

    def _lora(self, name: str) -> Adapters:
        if self.adapters is None:
            raise UnsupportedError(
                f"this engine serves no LoRA adapters (asked for {name}); start it with the `lora` engine option"
            )
        return self.adapters

    def add_request(self, req: GenerateRequest) -> None:
        self.check(req)
        if req.request_id in self.groups:
            raise ValueError(f"{req.request_id} was added twice")  # RequestIds are unique: a bug if seen
        r = Request(
            SequenceId(req.request_id),
            list(req.prompt_token_ids),
            req.params,
            next(self._arrival),
            req.priority,
            req.cache_salt,
            cache_namespace=req.cache_namespace,
            context_version=req.context_version,
            adapter=req.adapter,
            prompt_logprobs=[None] * len(req.prompt_token_ids) if req.params.prompt_logprobs is not None else None,
            speculate=req.speculate,
        )
        if isinstance(req.kv_transfer, KVHold):
            r.kv_hold = req.kv_transfer.hold_s
        elif isinstance(req.kv_transfer, KVImport):  # the prefill's first token is this request's first output
            r.kv_import, r.output_token_ids = req.kv_transfer, [req.kv_transfer.first_token]
        r.arrival_time = time.monotonic()
        r.make_generator()
        self.groups[req.request_id] = [r]
        if req.adapter is not None:
            self.adapters.enter(req.adapter)  # type: ignore[union-attr] - check() refused it without adapters
        if req.params.guided is None:
            self.scheduler.add(r)
        else:  # joins the queue when its grammar is compiled (at once if cached): see _admit_compiled
            self._compiling.append((r, self.grammars.submit(req.params.guided)))

    def abort(self, request_id: RequestId, index: int | None = None) -> list[TokenDelta]:
        """Finish every sequence of the request (or only sequence `index`) now; their blocks are
        free when this returns."""
        deltas = []
        for r in list(self.groups.get(request_id, [])):
            if (index is None or r.index == index) and not r.is_finished:
                self.scheduler.finish(r, "abort")
                deltas.append(self._delta(r, [], None))
        self._drop_if_done(request_id)
        return deltas

    def invalidate_cache(self, namespace: str | None, before_version: int | None = None) -> int:
        """Drop the namespace's cached prefixes (block_manager.py: invalidate); running requests keep theirs."""
        if self.kv_tier is not None:
            self.kv_tier.invalidate(namespace, before_version)
        return self.blocks.invalidate(namespace, before_version)

    def _check_kv_transfer(self, req: GenerateRequest) -> None:
        if req.params.n != 1 or req.params.prompt_logprobs is not None:
            raise UserError("a disaggregated request (prefill or decode) takes n=1 and no prompt_logprobs")
        if isinstance(req.kv_transfer, KVImport):
            check_import(self.runner.kv, req.kv_transfer, len(req.prompt_token_ids), engine_fingerprint(self.engine))

    def export_kv(self, handle: KVHandle) -> KVPayload:
        """A copy of the prompt KV a finished KVHold request holds (UserError once released or expired)."""
        return self.holds.export(self.runner.kv, handle, engine_fingerprint(self.engine))

    def release_kv(self, handle: KVHandle) -> None:
        self.holds.release(handle.request_id)

    def subscribe_kv_events(self, listener: KVCacheListener):
        """Hand `listener` the contract's prefix-cache events; returns the block manager's listener."""
        converted = contract_listener(listener)
        self.blocks.subscribe(converted)
        return converted

    def has_unfinished(self) -> bool:
        return self.scheduler.num_unfinished > 0 or bool(self._compiling)

    # ---- the step --------------------------------------------------------------------------
    def step(self) -> list[TokenDelta]:
        if self.kv_tier is not None:
            self.kv_tier.tick()  # the second tier's index, every persist_interval_s
        start, self._decode_only = time.perf_counter(), None
        deltas = self._step()
        if self._decode_only is not None:  # the speculation switch learns what a decode step costs
            self.speculator.switch.observe(*self._decode_only, time.perf_counter() - start)  # type: ignore[union-attr]
        return deltas

    def _step(self) -> list[TokenDelta]:
        failed = self._admit_compiled()
        if failed:
            return failed
        out = self.scheduler.schedule()
        if (
            self.speculator is not None
            and out.chunks
            and all(c.start >= c.request.num_prompt_tokens for c in out.chunks)
        ):
            self._decode_only = (len(out.chunks), sum(len(c.draft) for c in out.chunks))  # (batch, proposals)
        failed = [d for r, err in out.failed for d in self._failed(r, err)]  # adapters that would not load
        if not out.chunks:
            return failed
        for r in out.kv_imports:  # disaggregated decodes: their prompt's KV, before the step reads it
            import_blocks(self.runner.kv, self.blocks.block_table(r.seq), r.kv_import.payload)  # type: ignore[union-attr]
            r.kv_import = None
        self.steps += 1
        try:
            logits = self.runner.execute(out)
        except Exception as err:  # a failed step fails the requests it touched, not the engine
            log.exception("engine step failed")
            return failed + [d for c in out.chunks for d in self._fail(c.request, err)]
        self.prompt_tokens += self.scheduler.update(out)
        if self.adapters is not None:
            for c in out.chunks:
                if c.request.adapter is not None:
                    computed = max(min(c.end, c.request.num_prompt_tokens) - c.start, 0)
                    self.adapters.count_tokens(c.request.adapter, prompt=computed)
        prompt_lps = self._prompt_logprobs(out, logits)
        sampling = [
            (c.request, row)
            for c, row in zip(out.chunks, logits.sample_row, strict=True)
            if row is not None and not c.draft
        ]
        verifying = [(c, row) for c, row in zip(out.chunks, logits.sample_row, strict=True) if c.draft]
        try:
            tokens, lps = self._sample([r for r, _ in sampling], logits.logits[[row for _, row in sampling]])
        except Exception as err:
            log.exception("sampling failed")
            return failed + [d for r, _ in sampling for d in self._fail(r, err)]
        deltas: list[TokenDelta] = failed
        for c, row in verifying:
            try:
                rows = logits.logits[row : row + 1 + len(c.draft)]
                deltas.append(self._verify(c, rows, prompt_lps.get(c.request.seq)))
            except Exception as err:
                log.exception("verification failed")
                deltas += self._fail(c.request, err)
        for (r, row), tok, lp in zip(sampling, tokens, lps, strict=True):
            children = self._fork(r, logits.logits[[row]]) if r.params.n > 1 and not r.forked else []
            deltas.append(self._emit(r, tok, lp, prompt_lps.get(r.seq)))
            for child, (ctok, clp) in children:
                deltas.append(self._emit(child, ctok, clp, None))
        return deltas

    def _admit_compiled(self) -> list[TokenDelta]:
        """Constrained requests whose grammar is ready join the queue; a failed compile fails its request."""
        if not self._compiling:
            return []
        if not self.scheduler.num_unfinished:  # nothing else to run: wait a little rather than spin
            wait([f for _, f in self._compiling], timeout=0.02, return_when=FIRST_COMPLETED)
        deltas, still = [], []
        for r, fut in self._compiling:
            if r.is_finished:  # aborted while its grammar compiled
                continue
            if not fut.done():
                still.append((r, fut))
            elif fut.exception() is not None:
                deltas += self._fail(r, fut.exception())
            else:
                r.guided = self.grammars.state_of(fut.result())  # not from the LRU: it may have evicted it
                self.scheduler.add(r)
        self._compiling = still
        return deltas

    def _sample(self, reqs: list[Request], rows):
        """rows: (len(reqs), vocab) logits, one row per request."""
        if not reqs:
            return [], []
        return sample(rows, [self._row(r) for r in reqs])

    def _row(self, r: Request, ahead: list[int] | None = None) -> SampleRow:
        """ahead: proposals being verified, as if output already (its matcher stands after them)."""
        banned = list(r.params.stop_token_ids) + ([] if r.params.ignore_eos else sorted(self.engine.eos_token_ids))
        if r.guided is not None and ahead is None:
            r.guided.sync(r.output_token_ids)  # a no-op unless a path dropped or replayed tokens
        output = r.output_token_ids + ahead if ahead else r.output_token_ids
        return SampleRow(r.params, r.prompt_token_ids, output, r.generator, banned, r.guided)

    def _verify(self, c: ScheduledChunk, rows: torch.Tensor, prompt_lps) -> TokenDelta:
        """A speculating row: keep the proposals the target agrees with, release the rest's KV slots,
        emit the kept ones and the target's next token. rows: (1 + len(draft), vocab)."""
        r = c.request
        if r.guided is not None:
            r.guided.sync(r.output_token_ids)
        verdict = verify(rows, c.draft, lambda kept: self._row(r, kept))
        if r.guided is not None:
            r.guided.sync(r.output_token_ids)  # back to the output: emitting accepts the kept tokens again
        self.scheduler.settle(r, c.draft[: verdict.accepted])
        return self._emit_all(r, verdict.tokens, verdict.logprobs, prompt_lps, (len(c.draft), verdict.accepted))

    def _prompt_logprobs(self, out: SchedulerOutput, logits: StepLogits) -> dict[SequenceId, list]:
        """Record the prompt logprobs each chunk computed; returns the lists completed this step."""
        done = {}
        for c, first in zip(out.chunks, logits.prompt_rows, strict=True):
            r = c.request
            if r.prompt_logprobs is None:
                continue
            positions = c.prompt_logprob_positions
            if first is not None:
                logp = torch.log_softmax(logits.logits[first : first + len(positions)], dim=-1)
                for j, pos in enumerate(positions):
                    r.prompt_logprobs[pos + 1] = logprobs_of(
                        logp[j], r.prompt_token_ids[pos + 1], r.params.prompt_logprobs or 0
                    )
            if c.completes_prompt:
                done[r.seq], r.prompt_logprobs = r.prompt_logprobs, None
        return done

    def _fork(self, parent: Request, row: torch.Tensor) -> list[tuple[Request, tuple[int, object]]]:
        """Split a request of n sequences after its prompt: children share the prompt's blocks.
        row: (1, vocab) the parent's sampling logits, which each child samples on its own."""
        children = []
        for i in range(1, parent.params.n):
            child = Request(
                SequenceId(parent.seq.request, i),
                parent.prompt_token_ids,
                parent.params.model_copy(update={"n": 1}),
                parent.arrival,
                parent.priority,
                parent.cache_salt,
                cache_namespace=parent.cache_namespace,
                context_version=parent.context_version,
                adapter=parent.adapter,
                speculate=parent.speculate,
            )
            child.make_generator()
            if parent.params.guided is not None:  # the parent has accepted nothing yet: a fresh matcher
                child.guided = self.grammars.new_state(parent.params.guided)
            self.scheduler.fork(parent, child)
            self.groups[parent.seq.request].append(child)
            tok, lp = sample(row, [self._row(child)])
            children.append((child, (tok[0], lp[0])))
        return children

    def _emit(self, r: Request, token: int, lp, prompt_lps) -> TokenDelta:
        return self._emit_all(r, [token], [lp], prompt_lps)

    def _emit_all(self, r: Request, tokens: list[int], lps: list, prompt_lps, verified=None) -> TokenDelta:
        """Append tokens to the output until one finishes the sequence (the rest are dropped).
        verified: (proposed, accepted) when the tokens come from a verification (counted as emitted)."""
        kept = []
        for token in tokens:
            kept.append(token)
            r.output_token_ids.append(token)
            self.generated_tokens += 1
            if r.adapter is not None:
                self.adapters.count_tokens(r.adapter, generated=1)  # type: ignore[union-attr]
            finish, r.stop_reason = finish_reason(
                token, len(r.output_token_ids), r.num_tokens, r.params, self.engine.eos_token_ids, self.max_seq_len
            )
            if r.guided is not None and r.guided.accept(token) and r.guided.is_terminated and not finish:
                finish = "stop"  # the grammar is complete (its stop token was emitted though ignore_eos is set)
            if finish:
                self.scheduler.finish(r, finish, keep_blocks=r.kv_hold is not None)
                self._drop_if_done(r.seq.request)
                break
        if verified is not None:  # proposals after a token that finished the sequence were not used
            self.speculator.record(r, verified[0], min(verified[1], len(kept)))  # type: ignore[union-attr]
        kept_lps = lps[: len(kept)] if lps and lps[0] is not None else None
        delta = self._delta(r, kept, kept_lps, prompt_lps)
        if r.kv_hold is not None and r.is_finished:  # a disaggregated prefill: its prompt's KV waits for export
            self.holds.hold(r.seq, r.num_prompt_tokens, r.kv_hold)
            delta.kv_handle = KVHandle(r.seq.request, r.num_prompt_tokens, r.output_token_ids[0])
        return delta

    def _fail(self, r: Request, err: Exception) -> list[TokenDelta]:
        self.scheduler.finish(r, "error")
        return self._failed(r, err)

    def _failed(self, r: Request, err: Exception) -> list[TokenDelta]:
        """The error delta of a request the scheduler has finished."""
        self._drop_if_done(r.seq.request)
        d = self._delta(r, [], None)
        d.error = f"{type(err).__name__}: {err}"
        return [d]

    def _drop_if_done(self, request_id: RequestId) -> None:
        # A parent forks before its first token is emitted, so a group whose members have all
        # finished will never grow again.
        if all(x.is_finished for x in self.groups.get(request_id, [])):
            group = self.groups.pop(request_id, None)
            if group and group[0].adapter is not None:
                self.adapters.leave(group[0].adapter)  # type: ignore[union-attr]

    def _delta(self, r: Request, tokens, lps, prompt_lps=None) -> TokenDelta:
        first = len(r.output_token_ids) == len(tokens)
        queued = (r.scheduled_time or time.monotonic()) - r.arrival_time if first else None
        return TokenDelta(
            request_id=r.seq.request,
            index=r.index,
            token_ids=tokens,
            logprobs=lps,
            prompt_logprobs=prompt_lps,
            finish_reason=r.finish_reason if r.is_finished else None,
            stop_reason=r.stop_reason,
            num_prompt_tokens=r.num_prompt_tokens,
            num_cached_tokens=r.num_cached_tokens,
            num_preemptions=r.num_preemptions,
            queue_time=queued,
            spec=r.spec.snapshot() if r.spec is not None and r.spec.counts.drafts else None,
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
            cache_invalidations=s.invalidations,
            prefix_version_refusals=s.version_refusals,
            prefix_by_namespace=s.by_namespace,
            spec=self.speculator.totals_snapshot() if self.speculator is not None else SpecCounts(),
            **self._adapter_stats(),
            **(self.kv_tier.stats() if self.kv_tier is not None else {}),
            kv_block_bytes=self.kv_block_bytes,
        )

    def _adapter_stats(self) -> dict:
        if self.adapters is None:
            return {}
        cache = self.adapters.cache
        return {
            "adapter_loads": cache.loads,
            "adapter_evictions": cache.evictions,
            "adapter_hits": cache.hits,
            "by_adapter": dict(self.adapters.counts),
        }
