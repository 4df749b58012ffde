"""What an engine declares about itself: serve/ reads an engine's identity, limits and
capabilities from here (and its liveness from `Engine.heartbeat`), never from its attributes."""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.engine.options import EngineOptions
from trtserve.engine.pooling import PoolingConfig
from trtserve.engine.vision import VisionConfig


@dataclass(frozen=True)
class Capabilities:
    priorities: bool  # GenerateRequest.priority orders the engine's queue
    logprobs: bool  # TokenDelta.logprobs of sampled tokens
    max_top_logprobs: int  # most alternatives per token it returns (0: the sampled token's only)
    prompt_logprobs: bool
    guided_decoding: bool  # SamplingParams.guided (structured outputs)
    cache_invalidation: bool  # Engine.invalidate_cache works
    lora: bool = False  # LoRA adapters per request: Engine.load_adapter / unload_adapter work
    kv_transfer: bool = False  # GenerateRequest.kv_transfer, Engine.export_kv / release_kv work (disaggregation)
    kv_events: bool = False  # Engine.subscribe_kv_events works
    thinking: bool = False  # RequestOptions.thinking_span works: thinking budgets, grammars after the thinking


@dataclass(frozen=True)
class EngineInfo:
    backend: str  # manifest.json's backend: torch | tensorrt | trtllm (engine/backends.py)
    backend_version: str  # trtserve's version for torch; TensorRT-LLM's for the tensorrt_llm backends
    platform: str  # what KServe / Triton metadata report: trtserve_torch | tensorrt_llm
    fingerprint: str | None  # the manifest's hash (engine/manifest.py: engine_fingerprint); None: unknown
    max_seq_len: int  # prompt + output tokens of one sequence
    max_batch_size: int  # sequences in one engine step, after the run config's limit
    max_num_tokens: int  # tokens in one engine step
    options: EngineOptions  # the run-time options it runs with (engine/options.py)
    capabilities: Capabilities
    pooling: PoolingConfig | None = None  # a pooling engine's head (engine/pooling.py); None: it generates
    vision: VisionConfig | None = None  # a vision-language engine's images (engine/vision.py); None: text only
