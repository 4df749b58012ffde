"""A contract fake of the slice of TensorRT-LLM's LLM API that trtserve's adapter calls.

Mirrors TensorRT-LLM 1.0 (the PyTorch-backend `LLM`), written from trtserve's fact sheet
(`shared/reference/tensorrt-llm-facts.md`, sections 3a-3b) and `tensorrt_llm/executor/result.py`:

    LLM(model, tokenizer=None, **llm_args)          unknown llm_args -> TypeError (1.x LlmArgs forbid extras)
    LLM.generate_async(inputs, sampling_params, streaming=True) -> GenerationResult
        `async for` yields the result once per engine step; `.outputs[i]` are CompletionOutputs with
        cumulative token_ids, finish_reason in 'stop'|'length'|'timeout'|'cancelled', stop_reason,
        logprobs as [{token_id: Logprob(logprob, rank)}]; a failed request raises RequestError.
    GenerationResult.abort()                        the next step finishes it as 'cancelled'
    LLM.get_stats(timeout) -> [IterationStats JSON] drained since the last call (camelCase keys; the
                                                    0.20 docstring shows JSON strings, the fact sheet dicts)
    LLM.shutdown()
    SamplingParams(**fields)                        unknown fields -> TypeError

The "model" is a toy: token t+1 = (31 * t_last + 7 * t_prev + 11) % vocab under greedy decoding
(`reference_greedy`), seeded random choices otherwise. A prompt that starts with FAIL_TOKEN fails
after its first step. The engine steps in its own thread, like TensorRT-LLM's executor.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tensorrt_llm import llmapi
from tensorrt_llm._toy_model import next_greedy, reference_greedy
from tensorrt_llm.llmapi import CudaGraphConfig, KvCacheConfig, RequestError
from tensorrt_llm.sampling_fields import SAMPLING_FIELDS

__version__ = os.environ.get("FAKE_TRTLLM_VERSION", "1.0.0")
FAIL_TOKEN = 2
STEP_S = 0.004  # one engine iteration
INSTANCES: list = []  # every LLM created, for tests to inspect

_LLM_ARGS = {
    "max_batch_size": int,
    "max_num_tokens": int,
    "max_seq_len": int,
    "enable_chunked_prefill": bool,
    "kv_cache_config": KvCacheConfig,
    "cuda_graph_config": CudaGraphConfig,
    "enable_iter_perf_stats": bool,
}

__all__ = ["LLM", "SamplingParams", "llmapi", "RequestError", "reference_greedy", "FAIL_TOKEN", "INSTANCES"]


class SamplingParams:
    def __init__(self, **fields):
        unknown = set(fields) - SAMPLING_FIELDS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
        self.max_tokens = 32  # TensorRT-LLM's default
        self.n = 1
        self.end_id = self.pad_id = self.top_k = self.top_p = self.temperature = self.seed = self.logprobs = None
        self.stop_token_ids, self.bad_token_ids = [], []
        self.min_tokens, self.ignore_eos, self.include_stop_str_in_output = 0, False, False
        for k, v in fields.items():
            setattr(self, k, v)
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError("max_tokens must be a positive int")

    @property
    def greedy(self) -> bool:
        return self.top_k == 1 or self.temperature == 0 or (self.top_k is None and self.top_p is None)


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


class GenerationResult:
    def __init__(self, request_id: int, prompt: list[int], params: SamplingParams, llm: LLM, streaming: bool):
        self.request_id, self.prompt_token_ids, self.sampling_params = request_id, prompt, params
        self.streaming = streaming
        self.outputs = [CompletionOutput(i) for i in range(params.n)]
        self.finished = False
        self._llm = llm
        self._loop = asyncio.get_running_loop()
        self._aqueue: asyncio.Queue = asyncio.Queue()
        self._aborted = False
        self._rng = random.Random(params.seed if params.seed is not None else request_id)
        self.steps = 0
        self._done_sent = False  # the final snapshot (or error) was queued

    def abort(self) -> None:
        self._aborted = True

    def aborted(self) -> bool:
        return self._aborted

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

    async def aresult(self):
        async for _ in self:
            pass
        return self


class LLM:
    def __init__(self, model, tokenizer=None, tensor_parallel_size: int = 1, **kwargs):
        for k, v in kwargs.items():
            if k not in _LLM_ARGS:
                raise TypeError(f"LLM got an unexpected argument {k!r}")
            if not isinstance(v, _LLM_ARGS[k]):
                raise TypeError(f"LLM argument {k} must be a {_LLM_ARGS[k].__name__}, got {type(v).__name__}")
        cfg_path = Path(model) / "config.json"
        if not cfg_path.is_file():
            raise ValueError(f"{model} is not a model directory")
        cfg = json.loads(cfg_path.read_text())
        self.vocab = cfg.get("vocab_size") or cfg["pretrained_config"]["vocab_size"]
        self.model, self.tokenizer, self.args = str(model), tokenizer, kwargs
        self.tensor_parallel_size = tensor_parallel_size
        mapping = (cfg.get("pretrained_config") or {}).get("mapping")
        if mapping and mapping["tp_size"] != tensor_parallel_size:  # as the runtime's world-config check
            raise ValueError(f"tensor parallelism mismatch: engine {mapping['tp_size']}, LLM {tensor_parallel_size}")
        kv = kwargs.get("kv_cache_config") or KvCacheConfig()
        self.tokens_per_block = 32
        self.max_blocks = (kv.max_tokens // self.tokens_per_block) if kv.max_tokens else 1000
        self.max_batch_size = kwargs.get("max_batch_size", 2048)
        self._active: list[GenerationResult] = []
        self._lock = threading.Lock()
        self._stats: queue.Queue = queue.Queue()
        self._iter = 0
        self._alloc_total = self._reused = 0
        self._seen_blocks: set[tuple] = set()
        self._next_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-trtllm-executor", daemon=True)
        self._thread.start()
        self.aborted_ids: list[int] = []
        INSTANCES.append(self)

    def generate_async(self, inputs, sampling_params=None, streaming=False, **kwargs):
        if self._stop.is_set():
            raise RuntimeError("the LLM has been shut down")
        if not isinstance(inputs, list) or not all(isinstance(t, int) for t in inputs):
            raise TypeError("this fake takes prompt token ids only")
        if sampling_params is not None and sampling_params.n > self.max_batch_size:
            raise ValueError(f"SamplingParams.n ({sampling_params.n}) should not exceed max_batch_size")
        with self._lock:
            self._next_id += 1
            result = GenerationResult(self._next_id, inputs, sampling_params or SamplingParams(), self, streaming)
            self._account_prompt(inputs)
            self._active.append(result)
        return result

    def get_stats(self, timeout: float = 2):
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                out.append(self._stats.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            while not self._stats.empty():
                out.append(self._stats.get_nowait())
            break
        return out

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    # ---- the engine thread ----------------------------------------------------------------
    def _account_prompt(self, prompt: list[int]) -> None:
        tpb = self.tokens_per_block
        reuse = self.args.get("kv_cache_config", KvCacheConfig()).enable_block_reuse
        for b in range(len(prompt) // tpb):
            key = tuple(prompt[: (b + 1) * tpb])
            self._alloc_total += 1
            if reuse and key in self._seen_blocks:
                self._reused += 1
            self._seen_blocks.add(key)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                batch = self._active[: self.max_batch_size]
                for r in batch:
                    self._step(r)
                self._active = [r for r in self._active if not r._done_sent]
                if batch:
                    self._stats.put(json.dumps(self._iteration_stats(len(batch))))  # JSON strings, as documented
                    self._iter += 1
            time.sleep(STEP_S)

    def _step(self, r: GenerationResult) -> None:
        p = r.sampling_params
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
            if o.finish_reason is None:
                self._sample(r, o, p)
        self._send(r, done=all(o.finish_reason is not None for o in r.outputs))

    def _sample(self, r: GenerationResult, o: CompletionOutput, p: SamplingParams) -> None:
        seq = r.prompt_token_ids + o.token_ids
        tok = next_greedy(seq, self.vocab) if p.greedy else r._rng.randrange(self.vocab)
        while tok in p.bad_token_ids:
            tok = (tok + 1) % self.vocab
        early = len(o.token_ids) < p.min_tokens
        while early and (tok in p.stop_token_ids or tok == p.end_id):
            tok = (tok + 1) % self.vocab
        o.token_ids.append(tok)
        if p.logprobs:
            top = {tok: Logprob(-0.5, 1)}
            top.update({(tok + k) % self.vocab: Logprob(-1.0 - k, k + 1) for k in range(1, p.logprobs)})
            o.logprobs.append(top)
        if tok in p.stop_token_ids:
            o.finish_reason, o.stop_reason = "stop", tok
        elif tok == p.end_id and not p.ignore_eos:
            o.finish_reason = "stop"
        elif len(o.token_ids) >= p.max_tokens:
            o.finish_reason = "length"

    def _send(self, r: GenerationResult, done: bool) -> None:
        r._done_sent = done
        if r.streaming or done:
            r._push((copy.deepcopy(r.outputs), done))

    def _iteration_stats(self, active: int) -> dict:
        tpb = self.tokens_per_block
        used = sum(
            math.ceil((len(r.prompt_token_ids) + max(len(o.token_ids) for o in r.outputs)) / tpb) for r in self._active
        )
        return {
            "iter": self._iter,
            "iterLatencyMS": STEP_S * 1000,
            "numActiveRequests": active,
            "numQueuedRequests": max(0, len(self._active) - active),
            "kvCacheStats": {
                "maxNumBlocks": self.max_blocks,
                "freeNumBlocks": self.max_blocks - used,
                "usedNumBlocks": used,
                "tokensPerBlock": tpb,
                "allocTotalBlocks": self._alloc_total,
                "reusedBlocks": self._reused,
            },
        }
