"""The LLM object and its engine thread, shared by every release fake; what differs by release is a
class attribute or method each release's LLM subclass sets (and comments with its upstream file).

Imitates tensorrt_llm/llmapi/llm.py and tensorrt_llm/executor/result.py (1.0 to main):

    LLM(model, tokenizer=None, tensor_parallel_size=1, **llm_args)   args validated by the release's
                                                    pydantic args model (unknown keys: ValidationError)
    LLM.generate_async(ids, sampling_params, streaming=True, lora_request=None, cache_salt=None) -> GenerationResult;
        lora_request needs LoRA on (lora_config on the PyTorch LLM, an engine built with the LoRA
        plugin on the TensorRT one) and an adapter that fits it (lora.py); `async for` yields
        the result once per engine step; `.outputs[i]` are CompletionOutputs with cumulative token_ids,
        finish_reason in 'stop'|'length'|'timeout'|'cancelled', stop_reason, logprobs as
        [{token_id: Logprob(logprob, rank)}]; a failed request raises RequestError
    GenerationResult.abort()                        the next step finishes it as 'cancelled'
    LLM.get_stats(timeout) -> [dict]                iteration stats drained since the last call, dicts
                                                    with camelCase keys (1.0 on); "blocking" releases (facts.py)
                                                    return [] at once while idle and drain until a quiet gap
    LLM.get_stats_async(timeout)                    yielded one by one as they arrive; on 1.0-1.2 one shared
                                                    IterationResult (below): done after a wait times out until
                                                    the next generate_async, fed in 0.2 s bursts, and a
                                                    "not available yet" warning per call before any request
    LLM._collective_rpc("sleep"|"wakeup", (tags,))  needs the release's sleep argument; requests fail asleep;
                                                    sleep empties the KV blocks, the reuse tree keeps them (models.py)
    LLM.shutdown()
Logprobs (SamplingParams.logprobs=k): the toy distribution ranks token t by (t - greedy) mod vocab, with
logprob -0.5 x rank; what comes back is the release's (facts.py torch_logprobs); the TensorRT path
raises without gather_generation_logits and caps prompts as trtGptModel.h does.

The "model" is a toy (toy_model.py): greedy decoding follows `next_greedy`; sampling draws seeded
random tokens. A prompt that starts with FAIL_TOKEN fails after its first step. The engine steps in
its own thread, like TensorRT-LLM's executor. INSTANCES, aborted_ids and stats_calls are test hooks.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_fake_core.args import KvCacheConfig
from trtllm_fake_core.facts import ReleaseFacts
from trtllm_fake_core.lora import DEFAULT_TRTLLM_TO_HF, AdapterCache, hf_modules
from trtllm_fake_core.models import BlockPool, check_architecture
from trtllm_fake_core.speculation import Speculation, perf_metrics
from trtllm_fake_core.toy_model import next_greedy

FAIL_TOKEN = 2
STEP_S = 0.004  # one engine iteration
DISPATCH_S = 0.2  # executor/proxy.py dispatch_stats_task: time.sleep(0.2) between stats deliveries
NOT_READY = "Iteration statistics are not available yet"  # executor.py aget_stats, printed per call
INSTANCES: list = []  # every LLM created, for tests to inspect


class RequestError(RuntimeError):
    """A request failed in the executor (tensorrt_llm/executor/utils.py, RequestError)."""


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    cumulative_logprob: float | None = None
    logprobs: list = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    request_perf_metrics: object | None = None  # with SamplingParams.return_perf_metrics (speculation.py)


class GenerationResult:
    def __init__(self, request_id: int, prompt: list[int], params, streaming: bool):
        self.request_id, self.prompt_token_ids, self.sampling_params = request_id, prompt, params
        self.streaming = streaming
        self.lora_request = None  # the LoRARequest it runs under
        self.offset = 0  # its adapter's toy weights
        self.outputs = [CompletionOutput(i) for i in range(params.n)]
        self.finished = False
        self._loop = asyncio.get_running_loop()
        self._aqueue: asyncio.Queue = asyncio.Queue()
        self._aborted = False
        self._rng = random.Random(params.seed if params.seed is not None else request_id)
        self.steps = 0
        self._done_sent = False  # the final snapshot (or error) was queued

    def abort(self) -> None:
        self._aborted = True

    def _push(self, item) -> None:
        if not self._loop.is_closed():  # the caller's loop may be gone (it left the stream)
            self._loop.call_soon_threadsafe(self._aqueue.put_nowait, item)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.finished:
            raise StopAsyncIteration
        item = await self._aqueue.get()
        if isinstance(item, BaseException):
            self.finished = True
            raise item
        self.outputs, self.finished = item
        return self


class IterationResult:
    """executor/result.py IterationResult (1.0-1.2): the one object every get_stats_async call returns.
    `__anext__` waits `timeout` for the next iteration; when none comes it marks itself done, and stays
    done (yielding nothing at once) until generate_async calls `mark_undone`."""

    def __init__(self):
        self._done = False
        self._timeout = 2.0
        self.queue: queue.Queue = queue.Queue()

    def set_timeout(self, timeout: float) -> None:
        self._timeout = timeout

    def mark_undone(self) -> None:
        self._done = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._done:
            raise StopAsyncIteration
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return self.queue.get_nowait()
            except queue.Empty:
                if time.monotonic() >= deadline:
                    self._done = True
                    raise StopAsyncIteration from None
                await asyncio.sleep(STEP_S / 2)


async def _nothing():
    return
    yield


class FakeLLM:
    """What every release's LLM shares; subclasses set the release's behaviour."""

    args_model: type  # the release's pydantic args model (TorchLlmArgs / TrtLlmArgs)
    sampling_params_cls: type  # the release's SamplingParams
    facts: ReleaseFacts  # the release's row

    @property
    def idle_stats_at_once(self) -> bool:
        """get_stats returns [] without waiting while idle, and drains until a quiet gap otherwise."""
        return self.facts.stats == "blocking"

    def logprob_mode(self) -> str:
        return self.facts.torch_logprobs

    def check_input(self, prompt: list[int]) -> None:
        """The release's prompt-length rule (the TensorRT path's)."""

    def honours_sampling(self) -> bool:
        """Whether per-request sampling settings take effect (else every request decodes greedily)."""
        return True

    def check_args(self, kwargs: dict) -> None:
        """Release checks beyond the args model's own."""

    def lora_setup(self, cfg: dict) -> tuple[list[str], int] | None:
        """(lora_target_modules, max_lora_rank) the model is built with; None: LoRA off. The PyTorch
        backend builds LoRA layers from the LLM's lora_config (llm_args.py validate_lora_config_consistency:
        no modules and no lora_dir means every module; no modules with a lora_dir, the dir's)."""
        lc = self.llm_args.lora_config
        if lc is None:
            return None
        modules = list(lc.lora_target_modules)
        if not modules:
            modules = hf_modules(lc.lora_dir[0]) if lc.lora_dir else list(DEFAULT_TRTLLM_TO_HF)
        return modules, lc.max_lora_rank

    def read_model(self, model: Path) -> dict:
        """The model's config.json: a Hugging Face dir for the PyTorch backend."""
        cfg_path = model / "config.json"
        if not cfg_path.is_file():
            raise ValueError(f"{model} is not a model directory")
        cfg = json.loads(cfg_path.read_text())
        if "pretrained_config" not in cfg:  # a Hugging Face checkpoint (not a TensorRT engine's config)
            check_architecture(cfg, self.facts)
        return cfg

    def __init__(self, model, tokenizer=None, tensor_parallel_size: int = 1, **kwargs):
        self.check_args(kwargs)
        self.llm_args = self.args_model(
            model=str(model), tokenizer=tokenizer, tensor_parallel_size=tensor_parallel_size, **kwargs
        )
        self.kwargs = kwargs  # what the caller passed, for tests
        cfg = self.read_model(Path(model))
        self.vocab = cfg.get("vocab_size") or cfg["pretrained_config"]["vocab_size"]
        self.model, self.tokenizer, self.tensor_parallel_size = str(model), tokenizer, tensor_parallel_size
        kv = self.llm_args.kv_cache_config or KvCacheConfig()
        self.tokens_per_block = self.engine_tokens_per_block(cfg)
        lora = self.lora_setup(cfg)
        self.adapters = AdapterCache(*lora, self.vocab) if lora is not None else None
        self.lora_requests: list = []  # every lora_request given, in order (test hook)
        self.max_blocks = (kv.max_tokens // self.tokens_per_block) if kv.max_tokens else 1000
        self.max_batch_size = self.llm_args.max_batch_size or 2048
        spec = getattr(self.llm_args, "speculative_config", None)  # TorchLlmArgs only
        self.speculation = Speculation(spec, self.facts) if spec is not None else None
        self.blocks = BlockPool(self.tokens_per_block, kv.enable_block_reuse)  # prefix reuse (models.py)
        self._active: list[GenerationResult] = []
        self._lock = threading.Lock()
        self._stats: queue.Queue = queue.Queue()  # what get_stats and a per-call get_stats_async drain
        # the shared IterationResult's feed (upstream has one queue; the fake feeds the two paths apart,
        # and no test uses both on one LLM)
        self._iter_result: IterationResult | None = None
        self._undispatched: list[dict] = []
        self.not_ready_warnings = 0  # "statistics are not available yet" printed (test hook)
        self._stats_idle = True  # no request since the last idle get_stats
        self._iter = self._next_id = self.stats_calls = 0
        self.stale_requests: list[int] = []  # requests that reused blocks a sleep emptied (test hook)
        self._stop = threading.Event()
        self.asleep = False
        self.rpc_calls: list[tuple[str, tuple]] = []  # test hook
        self.aborted_ids: list[int] = []
        self._thread = threading.Thread(target=self._run, name="fake-trtllm-executor", daemon=True)
        self._thread.start()
        if self.facts.stats_result == "shared":
            threading.Thread(target=self._dispatch_stats, name="fake-trtllm-stats", daemon=True).start()
        INSTANCES.append(self)

    def engine_tokens_per_block(self, cfg: dict) -> int:
        # KvCacheConfig.tokens_per_block where the release has it (1.1 on); 32 otherwise
        return getattr(self.llm_args.kv_cache_config, "tokens_per_block", 32)

    def generate_async(
        self, inputs, sampling_params=None, streaming=False, lora_request=None, cache_salt=None, **kwargs
    ):
        if cache_salt is not None and not self.facts.cache_salt:
            raise TypeError("generate_async() got an unexpected keyword argument 'cache_salt'")
        if self._stop.is_set():
            raise RuntimeError("the LLM has been shut down")
        if not isinstance(inputs, list) or not all(isinstance(t, int) for t in inputs):
            raise TypeError("this fake takes prompt token ids only")
        params = sampling_params or self.sampling_params_cls()
        if self.asleep:
            raise RuntimeError("the executor is asleep: its memory is released")
        self.check_input(inputs)
        self.last_params = params  # test hook
        if getattr(params, "guided_decoding", None) is not None and self.llm_args.guided_decoding_backend is None:
            raise ValueError("guided decoding needs guided_decoding_backend set on the LLM")
        if params.n > self.max_batch_size:
            raise ValueError(f"SamplingParams.n ({params.n}) should not exceed max_batch_size")
        offset = 0
        if lora_request is not None:  # the worker loads the adapter (by id) before it enqueues the request
            if self.adapters is None:
                raise ValueError("lora_request is given but LoRA is not enabled for this LLM")
            offset = self.adapters.offset(lora_request)
            self.lora_requests.append(lora_request)
        with self._lock:
            self._next_id += 1
            result = GenerationResult(self._next_id, inputs, params, streaming)
            result.lora_request, result.offset = lora_request, offset
            if self.facts.stats_result == "shared":  # BaseLLM: _maybe_initialize_iteration_results, mark_undone
                self._iter_result = self._iter_result or IterationResult()
                self._iter_result.mark_undone()
            if self.blocks.account(inputs, cache_salt):  # garbage KV: other tokens than the model's
                result.offset += 7
                self.stale_requests.append(result.request_id)
            self._active.append(result)
            self._stats_idle = False
        return result

    def get_stats(self, timeout: float = 2) -> list[dict]:
        self.stats_calls += 1
        if self.idle_stats_at_once and self._stats_idle:
            return []  # 1.0: at once (with a warning per call) while idle
        out = []
        try:
            out.append(self._stats.get(timeout=timeout))
            while self.idle_stats_at_once or not self._stats.empty():  # 1.0 waits for a quiet gap of `timeout`
                out.append(self._stats.get(timeout=timeout) if self.idle_stats_at_once else self._stats.get_nowait())
        except queue.Empty:
            pass
        if not out:
            self._stats_idle = True
        return out

    def get_stats_async(self, timeout: float = 2):
        """`async for` yields each iteration's stats as it arrives, until none comes for `timeout`: the shared
        IterationResult (1.0-1.2), else a fresh drain per call."""
        self.stats_calls += 1
        if self.facts.stats_result == "shared":
            if self._iter_result is None:
                self.not_ready_warnings += 1
                print(
                    f"{NOT_READY}. To collect runtime statistics, call get_stats_async() after prompts are submitted."
                )
                return _nothing()
            self._iter_result.set_timeout(timeout)
            return self._iter_result

        async def stream():
            if self.idle_stats_at_once and self._stats_idle:
                return
            deadline = time.monotonic() + timeout
            while True:
                try:
                    item = self._stats.get_nowait()
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        break
                    await asyncio.sleep(STEP_S / 2)
                    continue
                deadline = time.monotonic() + timeout
                yield item
            self._stats_idle = True

        return stream()

    def _dispatch_stats(self) -> None:
        """executor/proxy.py dispatch_stats_task: every 0.2 s, what the executor reported since, at once."""
        while not self._stop.wait(DISPATCH_S):
            with self._lock:
                burst, self._undispatched = self._undispatched, []
                target = self._iter_result
            for item in burst if target is not None else []:
                target.queue.put(item)

    def _collective_rpc(self, method: str, args: tuple = ()):
        arg = self.facts.sleep_arg
        if method not in ("sleep", "wakeup") or arg is None or getattr(self.llm_args, arg, None) in (None, False):
            raise RuntimeError(f"{method} is not available: the LLM was created without sleep support")
        if self.tensor_parallel_size > 1:  # executor/base_worker.py (main): sleep / wakeup need world_size 1
            raise NotImplementedError(f"{method} is only supported with world_size == 1")
        self.rpc_calls.append((method, args))
        self.asleep = method == "sleep"
        if self.asleep:
            self.blocks.release(args[0])

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    # ---- the engine thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                batch = self._active[: self.max_batch_size]
                for r in batch:
                    self._step(r)
                self._active = [r for r in self._active if not r._done_sent]
                if batch:
                    stats = self._iteration_stats(len(batch))
                    self._stats.put(stats)
                    self._undispatched.append(stats)
                    self._iter += 1
            time.sleep(STEP_S)

    def _step(self, r: GenerationResult) -> None:
        r.steps += 1
        if r._aborted:
            self.aborted_ids.append(r.request_id)
            for o in r.outputs:
                o.finish_reason = o.finish_reason or "cancelled"
            return self._send(r, done=True)
        if r.prompt_token_ids[0] == FAIL_TOKEN and r.steps > 1:
            r._done_sent = True
            return r._push(RequestError(f"fake executor error on request {r.request_id}"))
        for o in r.outputs:
            accepted = 0
            if self.speculation is not None and o.token_ids and o.finish_reason is None:  # a generation step
                accepted = self.speculation.verify(r.request_id, o.index, r.prompt_token_ids + o.token_ids)
            for _ in range(1 + accepted):  # the kept drafts, then the target's own token
                if o.finish_reason is None:
                    self._sample(r, o, r.sampling_params)
        self._send(r, done=all(o.finish_reason is not None for o in r.outputs))

    def _sample(self, r: GenerationResult, o: CompletionOutput, p) -> None:
        seq = r.prompt_token_ids + o.token_ids
        greedy = p._greedy_decoding or not self.honours_sampling()
        tok = next_greedy(seq, self.vocab, r.offset) if greedy else r._rng.randrange(self.vocab)
        while tok in p.bad_token_ids:
            tok = (tok + 1) % self.vocab
        while len(o.token_ids) < p.min_tokens and (tok in p.stop_token_ids or tok == p.end_id):
            tok = (tok + 1) % self.vocab
        o.token_ids.append(tok)
        if p.logprobs:
            o.logprobs.append(self._logprobs(next_greedy(seq, self.vocab, r.offset), tok, p.logprobs))
        if tok in p.stop_token_ids:
            o.finish_reason, o.stop_reason = "stop", tok
        elif tok == p.end_id and not p.ignore_eos:
            o.finish_reason = "stop"
        elif len(o.token_ids) >= p.max_tokens:
            o.finish_reason = "length"

    def _logprobs(self, greedy: int, tok: int, k: int) -> dict:
        def lp(t: int) -> Logprob:
            rank = (t - greedy) % self.vocab + 1
            return Logprob(-0.5 * rank, rank)

        top = {(greedy + i) % self.vocab: lp((greedy + i) % self.vocab) for i in range(k)}
        mode = self.logprob_mode()
        if mode == "sampled":
            return {tok: lp(tok)}
        return top if mode == "topk" else {**top, tok: lp(tok)}

    def _send(self, r: GenerationResult, done: bool) -> None:
        r._done_sent = done
        if r.sampling_params.return_perf_metrics:
            for o in r.outputs:
                o.request_perf_metrics = perf_metrics(self.speculation, r.request_id, o.index, self._iter)
        if r.streaming or done:
            r._push((copy.deepcopy(r.outputs), done))

    def _iteration_stats(self, active: int) -> dict:
        tpb = self.tokens_per_block
        used = sum(
            math.ceil((len(r.prompt_token_ids) + max(len(o.token_ids) for o in r.outputs)) / tpb) for r in self._active
        )
        spec = self.speculation.take_iteration() if self.speculation is not None else None
        return ({"specDecodingStats": spec} if spec is not None else {}) | {
            "iter": self._iter,
            "iterLatencyMS": STEP_S * 1000,
            "numActiveRequests": active,
            "numQueuedRequests": max(0, len(self._active) - active),
            "kvCacheStats": {
                "maxNumBlocks": self.max_blocks,
                "freeNumBlocks": self.max_blocks - used,
                "usedNumBlocks": used,
                "tokensPerBlock": tpb,
                "allocTotalBlocks": self.blocks.alloc_total,
                "reusedBlocks": self.blocks.reused,
            },
        }


class FakeTrtEngineLLM(FakeLLM):
    """The TensorRT-engine LLM (1.0-1.2: tensorrt_llm/_tensorrt_engine, llmapi/llm.py _TrtLLM): MODEL is
    what trtllm-build wrote, read as tensorrt_llm/builder.py's EngineConfig does (nested plugin_config)."""

    def read_model(self, model: Path) -> dict:
        cfg = super().read_model(model)
        if "pretrained_config" not in cfg or "plugin_config" not in cfg.get("build_config", {}):
            raise ValueError(f"{model} is not a TensorRT-LLM engine dir (config.json lacks build_config.plugin_config)")
        mapping = cfg["pretrained_config"].get("mapping") or {}
        if mapping.get("tp_size", 1) != self.llm_args.tensor_parallel_size:  # the runtime's world-config check
            raise ValueError(
                f"tensor parallelism mismatch: engine {mapping['tp_size']}, LLM {self.llm_args.tensor_parallel_size}"
            )
        for r in range(mapping.get("tp_size", 1)):
            if not (model / f"rank{r}.engine").is_file():
                raise ValueError(f"{model} lacks rank{r}.engine")
        return cfg

    def engine_tokens_per_block(self, cfg: dict) -> int:
        build = cfg["build_config"]
        self._engine_build = build
        plugin = build["plugin_config"]
        self._chunked = self.llm_args.enable_chunked_prefill
        if self._chunked and not (plugin["context_fmha"] and plugin["use_paged_context_fmha"]):
            raise ValueError("Chunked context requires paged context FMHA; rebuild the engine with it or turn it off")
        if self.llm_args.kv_cache_config.enable_block_reuse and not plugin["use_paged_context_fmha"]:
            raise ValueError("KV cache reuse requires paged context FMHA (trtGptModelInflightBatching.cpp)")
        return plugin["tokens_per_block"]

    def logprob_mode(self) -> str:
        return "topk+sampled"  # top-k from the gathered generation logits (executor/base_worker.py)

    def check_input(self, prompt: list[int]) -> None:
        # trtGptModel.h: without chunked context the input is capped at min(max_seq_len - 1, max_num_tokens)
        b = self._engine_build
        cap = b["max_seq_len"] - 1 if self._chunked else min(b["max_seq_len"] - 1, b["max_num_tokens"])
        if len(prompt) > cap:
            raise ValueError(f"The prompt length ({len(prompt)}) exceeds the max input length ({cap})")

    def generate_async(self, inputs, sampling_params=None, streaming=False, lora_request=None, **kwargs):
        # BaseLLM._check_arguments on the TensorRT backend
        if sampling_params is not None and sampling_params.logprobs and not self.llm_args.gather_generation_logits:
            raise ValueError("logprobs on the TensorRT backend require gather_generation_logits=True in LLM()")
        return super().generate_async(inputs, sampling_params, streaming, lora_request, **kwargs)

    def lora_setup(self, cfg: dict) -> tuple[list[str], int] | None:
        """LoRA is on when the engine was built with the LoRA plugin, for the modules and rank it was built
        with; the LLM's lora_config only sizes the adapter cache (_TrtLLM._build_model)."""
        if not cfg["build_config"]["plugin_config"].get("lora_plugin"):
            return None
        built = cfg["build_config"]["lora_config"]
        return list(built["lora_target_modules"]), built["max_lora_rank"]
