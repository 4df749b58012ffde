"""The tensorrt_llm backend: our Engine interface over TensorRT-LLM's LLM API.

TensorRT-LLM brings its own in-flight batcher and paged KV cache, so this adapter only submits,
streams, cancels and reports; the mapping logic lives in the pure modules beside it. Calls made
on TensorRT-LLM (release of the documentation each was taken from):

    LLM.generate_async(prompt_token_ids, sampling_params=SamplingParams(**kw), streaming=True
                       [, lora_request=LoRARequest(name, int_id, path)])
        -> a result that `async for` yields once per step, `.outputs[i]` cumulative  (1.0; 0.20 source)
    speculative_config=NGramDecodingConfig | DraftTargetDecodingConfig   an LLM argument (speculative.py);
                                          no per-request switch, so a request's opt-out is refused (400);
                                          its acceptance is read back from iteration stats and, where the
                                          release fills them, per-request perf metrics (spec_counts.py)
    result.abort()                        cancel; the stream then ends with finish_reason 'cancelled'  (0.20 source, 1.0)
    LLM.get_stats_async(timeout)          iteration-stat dicts one by one as they come (stats_poller.py: the
                                          drain of get_stats blocks while requests decode); each has `iter`
                                          and `iterLatencyMS` (IterationStats.to_json_str)
    LLM._collective_rpc("sleep"|"wakeup", (tags,))   the executor's memory released / restored (sleep.py)
    LLM.shutdown()                        (1.0 docs)
What differs between releases (the sampler switch, the TensorRT-engine LLM) comes from the
installed TensorRT-LLM's capabilities (capabilities.py), read when the engine opens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from trtserve.backends.tensorrt_llm.adapters import LORA_OPTION, EngineAdapters
from trtserve.backends.tensorrt_llm.capabilities import lora_classes
from trtserve.backends.tensorrt_llm.llm import create_llm, open_tensorrt_llm, read_options
from trtserve.backends.tensorrt_llm.logprobs import check_logprobs, support
from trtserve.backends.tensorrt_llm.outputs import DeltaTracker
from trtserve.backends.tensorrt_llm.sampling import (
    ALLOW_N_GREEDY_ENV,
    GUIDED_BACKEND_KEY,
    check_supported,
    to_trtllm_sampling,
)
from trtserve.backends.tensorrt_llm.serve_plan import apply_runtime, max_input_tokens, paged_context_fmha
from trtserve.backends.tensorrt_llm.sleep import Sleeper
from trtserve.backends.tensorrt_llm.spec_counts import PERF_METRICS_FLAG, log_what_is_reported
from trtserve.backends.tensorrt_llm.speculative import SPEC_OPTION, speculative_options
from trtserve.backends.tensorrt_llm.stats import engine_stats
from trtserve.backends.tensorrt_llm.stats_poller import STATS_WAIT_S, IterationBusy, StatsPoller  # noqa: F401
from trtserve.engine.adapters import AdapterRef
from trtserve.engine.backends import backend_spec
from trtserve.engine.errors import UnsupportedError, UserError
from trtserve.engine.ids import RequestId
from trtserve.engine.info import Capabilities, EngineInfo
from trtserve.engine.layout import TOKENIZER_DIR, TRT_ENGINE_DIR, read_engine_config
from trtserve.engine.manifest import engine_fingerprint, verify_engine_dir
from trtserve.engine.messages import GenerateRequest, TokenDelta
from trtserve.engine.options import check_backend
from trtserve.engine.rules import check_request, load_tokenizer
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.stats import AdapterCounts, AdapterStats, EngineStats

log = logging.getLogger(__name__)
STATS_POLL_S = 1.0  # between stats rounds while TensorRT-LLM reports nothing (idle)
# STATS_WAIT_S (stats_poller.py): a stats round ends after this long without an iteration

# Under Dynamo an engine dir of this backend runs in Dynamo's own TensorRT-LLM worker (docs/dynamo.md).
_NO_KV_TRANSFER = (
    "the TensorRT-LLM backend moves no KV or prefix events through trtserve; run it under "
    "`python -m dynamo.trtllm` (trtserve dynamo --dry-run prints the command)"
)


class TrtllmEngine:
    def __init__(self, engine_dir: str | Path, config: RuntimeConfig | None = None):
        cfg = config or RuntimeConfig()
        path = Path(engine_dir)
        manifest = verify_engine_dir(path)
        check_backend(cfg.options, manifest.backend)  # before TensorRT-LLM is imported
        self._tllm, self.capabilities = open_tensorrt_llm(path, manifest)
        self._allow_n_greedy = bool(os.environ.get(ALLOW_N_GREEDY_ENV))  # TensorRT-LLM reads the same variable
        ecfg = read_engine_config(path)
        self.vocab_size = ecfg.pretrained_config.vocab_size
        self.tokenizer, self.eos_token_ids = load_tokenizer(path / TOKENIZER_DIR)
        kv_tokens = None
        if cfg.kv_cache_memory:
            kv_tokens = int(cfg.kv_cache_memory) // ecfg.pretrained_config.kv_bytes_per_token()
        built = read_options(path)
        options = apply_runtime(
            built,
            kv_cache_tokens=kv_tokens,
            enable_prefix_caching=cfg.enable_prefix_caching,
            max_batch_size=cfg.max_batch_size,
            max_num_tokens=cfg.max_num_tokens,
            kv_offload=cfg.kv_offload,
        )
        # the LoRA adapters it serves (UserError for one that does not fit) and the LLM's lora_config
        self._adapters = EngineAdapters(path, manifest.backend, options, cfg.lora)
        options = {k: v for k, v in options.items() if k != LORA_OPTION}
        if self._adapters.llm_option is not None:
            options[LORA_OPTION] = self._adapters.llm_option
        if cfg.speculative is not None:  # the run config's speculative option wins over the engine dir's
            options[SPEC_OPTION] = speculative_options(cfg.speculative, self.capabilities.line, manifest.backend)
        self._speculates = SPEC_OPTION in options
        # per-request acceptance where the release fills it (spec_counts.py); engine totals come from stats
        self._spec_per_request = self._speculates and self.capabilities.spec_request_metrics
        if self._speculates:
            log_what_is_reported(self.capabilities)
        self._lora_request = lora_classes(self._tllm)[1]
        if self._adapters.table is not None and self._lora_request is None:
            self._adapters.close()
            raise UserError(f"{self.capabilities.label} has no LoRARequest; serve the adapters with the torch backend")
        self._by_adapter: dict[str, AdapterCounts] = {}  # adapter name -> its requests' counts
        log.info("starting %s for a %s engine dir: %s", self.capabilities.label, manifest.backend, path)
        self._guided_backend = options.get(GUIDED_BACKEND_KEY)  # None: guided requests are refused (400)
        self._logprobs = support(self.capabilities, manifest.backend, options, built)
        # the longest prompt TensorRT-LLM takes (None: max_seq_len's rule); the TensorRT path without
        # chunked context stops at max_num_tokens
        self._max_input = max_input_len(path, manifest.backend, ecfg, options)
        tp = int(manifest.build_config.get("tp_size", 1))
        self._sleeper = Sleeper(self._tllm, self.capabilities, manifest.backend, options, tp)
        self.info = EngineInfo(
            backend=manifest.backend,
            backend_version=manifest.toolchain.get("tensorrt_llm", "unknown"),  # the release that built it
            platform=backend_spec(manifest.backend).platform,
            fingerprint=engine_fingerprint(manifest),
            max_seq_len=ecfg.build_config.max_seq_len,
            max_batch_size=ecfg.build_config.batch_limit(cfg.max_batch_size),
            max_num_tokens=options.get("max_num_tokens") or ecfg.build_config.max_num_tokens,
            options=cfg.options,
            # check_supported refuses priorities and prompt logprobs; logprobs as the backend and release
            # return them (logprobs.py); guided decoding needs the LLM's guided backend; no KV namespaces
            capabilities=Capabilities(
                priorities=False,
                logprobs=self._logprobs.logprobs,
                max_top_logprobs=self._logprobs.max_top,
                prompt_logprobs=False,
                guided_decoding=self._guided_backend is not None,
                cache_invalidation=False,
                lora=self._adapters.table is not None,  # TensorRT-LLM's LoRARequest per request
            ),
        )
        try:
            self.llm = create_llm(
                self._tllm, self.capabilities, manifest.backend, path, options, path / TOKENIZER_DIR, tp
            )
        except BaseException:
            self._adapters.close()  # the adapter copies made for it
            raise
        self._sleeper.llm = self.llm
        self._results: dict[RequestId, tuple[object, int, set[int]]] = {}  # request id -> (result, n, stopped indices)
        self._prompt_tokens = self._generated_tokens = 0
        # when TensorRT-LLM last showed it moves: an iteration's stats, a streamed output, or an idle poll
        self._beat = time.monotonic()
        self._closed = False
        self._poller = StatsPoller(self.llm, self._touch, lambda: not self._results, STATS_POLL_S, STATS_WAIT_S)

    # ---- the Engine interface ---------------------------------------------------------------
    def check(self, request: GenerateRequest) -> None:
        check_request(
            request,
            max_seq_len=self.info.max_seq_len,
            vocab_size=self.vocab_size,
            max_batch_size=self.info.max_batch_size,
        )
        check_supported(request, allow_n_greedy=self._allow_n_greedy, guided_backend=self._guided_backend)
        check_logprobs(request.params, self._logprobs)
        if self._max_input is not None and len(request.prompt_token_ids) > self._max_input:
            raise UserError(
                f"the prompt has {len(request.prompt_token_ids)} tokens, more than the {self._max_input} this "
                "TensorRT engine takes (max_num_tokens: it was built without paged context FMHA, so TensorRT-LLM "
                "cannot chunk the context); shorten the prompt, or rebuild with a larger --max-num-tokens"
            )
        self._sleeper.check_awake()
        if not request.options.speculate and self._speculates:
            raise UserError(
                "this TensorRT-LLM engine speculates for every request (TensorRT-LLM has no per-request switch); "
                "send the request without the speculative-decoding opt-out, or serve it with the torch backend"
            )
        if request.options.adapter is not None:
            self._adapters.lookup(request.options.adapter)  # UserError: not served, or replaced since

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        """Stream the request's deltas; leaving early (cancel, disconnect) aborts it in TensorRT-LLM."""
        if not self.health():
            raise RuntimeError("the TensorRT-LLM engine is shut down")
        self.check(request)
        rid, p = request.request_id, request.params
        try:  # SamplingParams validates too (ranges, greedy with n > 1), so it is built in here
            kw = to_trtllm_sampling(p, self.eos_token_ids)
            if self._spec_per_request:
                kw[PERF_METRICS_FLAG] = True  # request_perf_metrics.speculative_decoding on each output
            if "guided_decoding" in kw:
                kw["guided_decoding"] = self._tllm.llmapi.GuidedDecodingParams(**kw["guided_decoding"])
            sp = self._tllm.SamplingParams(**kw)
            extra = {}
            salt = self._sleeper.cache_salt()  # after a wake-up: no pre-sleep KV block may match (sleep.py)
            if salt is not None:
                extra["cache_salt"] = salt
            if request.options.adapter is not None:
                served = self._adapters.lookup(request.options.adapter)
                extra["lora_request"] = self._lora_request(served.spec.ref.name, served.int_id, str(served.spec.path))
            result = self.llm.generate_async(
                list(request.prompt_token_ids), sampling_params=sp, streaming=True, **extra
            )
        except ValueError as err:  # TensorRT-LLM's own argument checks (lengths, n vs max_batch_size, ...)
            raise UserError(f"TensorRT-LLM refused the request: {err}") from None
        self._poller.submitted()  # TensorRT-LLM's stats result moves again (stats_poller.py)
        self._results[rid] = (result, p.n, set())
        self._prompt_tokens += len(request.prompt_token_ids)
        name = request.options.adapter.name if request.options.adapter is not None else None
        self._count(name, requests=1, prompt_tokens=len(request.prompt_token_ids))
        tracker = DeltaTracker(rid, len(request.prompt_token_ids), frozenset(p.stop_token_ids), p.logprobs)
        tracker.read_spec = self._spec_per_request
        try:
            try:
                async for snapshot in result:
                    self._beat = time.monotonic()
                    for d in tracker.deltas(snapshot):
                        self._generated_tokens += len(d.token_ids)
                        self._count(name, generated_tokens=len(d.token_ids))
                        yield d
                    if len(tracker.finished) >= p.n:
                        break
                leftover = tracker.abort_all(p.n, "TensorRT-LLM ended the stream without finishing it")
            except Exception as err:  # TensorRT-LLM failed this request (RequestError, executor error)
                log.warning("request %s failed in TensorRT-LLM: %s", rid, err)
                leftover = tracker.abort_all(p.n, f"{type(err).__name__}: {err}")
            for d in leftover:
                yield d
        finally:
            self._results.pop(rid, None)
            if len(tracker.finished) < p.n:
                _abort(result)

    def abort(self, request_id: RequestId, index: int | None = None) -> None:
        """Cancel the request; for one sequence of n > 1, once all its sequences were asked to stop."""
        entry = self._results.get(request_id)
        if entry is None:
            return
        result, n, stopped = entry
        if index is not None and n > 1:
            stopped.add(index)  # TensorRT-LLM cancels whole requests only; the rest keep running
            if len(stopped) < n:
                return
        _abort(result)

    async def invalidate_cache(self, namespace: str | None, before_version: int | None = None) -> int:
        raise UnsupportedError(
            "cache invalidation is not supported by the tensorrt_llm backend (TensorRT-LLM's KV cache "
            "manager has no per-namespace eviction); serve the engine with the torch backend to use it"
        )

    async def load_adapter(self, name: str, path: Path) -> AdapterRef:
        """Serve the adapter at `path` as `name`: later requests naming it carry a LoRARequest with a
        fresh int id, so TensorRT-LLM loads these weights; submitted ones keep their old id."""
        spec = await asyncio.to_thread(self._adapters.prepare, name, path)  # copy, read, check
        return self._adapters.add(spec)

    async def unload_adapter(self, name: str) -> None:
        self._adapters.remove(name)

    def adapters(self) -> list[AdapterRef]:
        return self._adapters.refs()

    async def export_kv(self, handle):
        raise UnsupportedError(_NO_KV_TRANSFER)

    def release_kv(self, handle) -> None:
        raise UnsupportedError(_NO_KV_TRANSFER)

    def subscribe_kv_events(self, listener):
        raise UnsupportedError(_NO_KV_TRANSFER)

    async def sleep(self) -> None:
        """Let the requests in flight finish, then release the executor's GPU memory (weights, KV cache, ...);
        UnsupportedError where this engine cannot (sleep.py)."""
        await self._sleeper.sleep(running=lambda: len(self._results))

    async def wake_up(self) -> None:
        await self._sleeper.wake_up()

    def stats(self) -> EngineStats:
        latest = self._poller.latest
        stats = engine_stats(latest, prompt_tokens=self._prompt_tokens, generated_tokens=self._generated_tokens)
        # TensorRT-LLM's adapter cache reports no hits or evictions: only our loads are counted
        return replace(
            stats,
            busy_seconds=self._poller.busy.seconds(),
            adapters=AdapterStats(loads=self._adapters.loads, by_adapter=dict(self._by_adapter)),
            spec=self._poller.spec.snapshot(),  # every iteration's acceptance (none: all 0)
        )

    def _count(self, adapter: str | None, **add: int) -> None:
        if adapter is None:
            return
        c = self._by_adapter.get(adapter, AdapterCounts())
        self._by_adapter[adapter] = replace(c, **{k: getattr(c, k) + v for k, v in add.items()})

    def health(self) -> bool:
        return not self._closed

    def heartbeat(self) -> float:
        return self._beat

    def _touch(self) -> None:
        self._beat = time.monotonic()

    def shutdown(self) -> None:
        self._closed = True
        self._poller.close()
        self.llm.shutdown()
        self._adapters.close()


def max_input_len(path: Path, backend: str, ecfg, options: dict) -> int | None:
    """The TensorRT path's prompt limit below max_seq_len's, from the engine's own config.json (what
    trtllm-build left): without chunked context, max_num_tokens; None where max_seq_len's rule is all."""
    if backend != "tensorrt":
        return None
    built = json.loads((path / TRT_ENGINE_DIR / "config.json").read_text())["build_config"]
    if options.get("enable_chunked_prefill") and paged_context_fmha(built["plugin_config"]):
        return None
    max_num_tokens = options.get("max_num_tokens") or ecfg.build_config.max_num_tokens
    return max_input_tokens(ecfg.build_config.max_seq_len, max_num_tokens, chunked=False)


def _abort(result) -> None:
    try:
        result.abort()
    except Exception as err:  # already finished or the executor is gone
        log.debug("abort failed: %s", err)
