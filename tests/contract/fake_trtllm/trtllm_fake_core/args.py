"""LLM arguments as TensorRT-LLM 1.x declares them: pydantic models that forbid unknown keys.

Imitates tensorrt_llm/llmapi/llm_args.py (1.0 to main): `StrictBaseModel` (extra="forbid"), so an
unknown or mistyped LLM argument raises pydantic.ValidationError (a ValueError) from `LLM(...)`;
KvCacheConfig and CudaGraphConfig are pydantic too. Only a slice of the real fields is declared:
what trtserve sets plus a few neighbours, so introspection (`model_fields`) has something to read.
Each release's llmapi/llm_args.py subclasses these with its own fields.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator


class StrictBaseModel(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class KvCacheConfigBase(StrictBaseModel):
    """The KvCacheConfig fields of every release from 1.0 to main; each release's class adds its own
    (release_kv_cache_config), and unknown fields raise (StrictBaseModel)."""

    enable_block_reuse: bool = True
    max_tokens: int | None = None
    max_attention_window: list[int] | None = None
    sink_token_length: int | None = None
    free_gpu_memory_fraction: float | None = None  # None: the C++ default 0.9
    host_cache_size: int | None = None  # bytes of the secondary (host) pool; evicted reusable blocks go there
    cross_kv_cache_fraction: float | None = None
    secondary_offload_min_priority: int | None = None
    event_buffer_max_size: int = 0
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    dtype: str = "auto"  # PyTorch backend only; only "fp8" is acted on (others log "Cannot sync ...")

    @field_validator("free_gpu_memory_fraction")
    @classmethod
    def _fraction(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v < 1:
            raise ValueError("free_gpu_memory_fraction must be in (0, 1)")
        return v


class KvCacheConfig(KvCacheConfigBase):
    """1.0's: `onboard_blocks` (host-pool blocks copied back on a hit; removed on main by PR #12449)."""

    onboard_blocks: bool = True


# fields some releases add to KvCacheConfigBase: name -> (type, default)
KV_CACHE_EXTRA_FIELDS = {
    "onboard_blocks": (bool, True),  # 1.0-1.2
    "tokens_per_block": (int, 32),  # 1.1 on (llm_args.py KvCacheConfig, the PyTorch backend's block size)
}


def release_kv_cache_config(facts) -> type:
    """The release's llmapi.KvCacheConfig: the shared fields plus those of its facts row's kv_cache_fields."""
    extra = {name: spec for name, spec in KV_CACHE_EXTRA_FIELDS.items() if name in facts.kv_cache_fields}
    if set(extra) == {"onboard_blocks"}:
        return KvCacheConfig
    return create_model("KvCacheConfig", __base__=KvCacheConfigBase, __module__="tensorrt_llm.llmapi.llm_args", **extra)


class CudaGraphConfig(StrictBaseModel):
    batch_sizes: list[int] | None = None
    max_batch_size: int = 0
    enable_padding: bool = False


class BaseLlmArgs(StrictBaseModel):
    model: str
    tokenizer: str | None = None
    tokenizer_mode: str = "auto"
    trust_remote_code: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    dtype: str = "auto"
    backend: str | None = None
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    max_seq_len: int | None = None
    max_beam_width: int | None = None
    enable_chunked_prefill: bool = False
    gather_generation_logits: bool = False
    guided_decoding_backend: Literal["xgrammar", "llguidance"] | None = None
    kv_cache_config: KvCacheConfigBase = Field(default_factory=KvCacheConfig)  # the release's class
    enable_lora: bool = False
    lora_config: object | None = None  # the release's LoraConfig (its own class: lora_helper / _torch.peft)
    speculative_config: object | None = None  # the release's *DecodingConfig (its llm_args.py)
    spec_backend: ClassVar[str]  # the name the decoding configs' supports_backend is asked about

    @model_validator(mode="after")
    def _speculation_runs_here(self):
        # BaseLlmArgs.validate_speculative_config: a decoding config refuses a backend it cannot run on
        spec = self.speculative_config
        if spec is not None and not spec.supports_backend(self.spec_backend):
            raise ValueError(f"{type(spec).__name__} does not support backend {self.spec_backend}")
        return self


class TorchLlmArgsBase(BaseLlmArgs):
    """The PyTorch backend's fields every release from 1.0 has."""

    spec_backend: ClassVar[str] = "pytorch"

    cuda_graph_config: CudaGraphConfig | None = Field(default_factory=CudaGraphConfig)
    disable_overlap_scheduler: bool = False
    attn_backend: str = "TRTLLM"
    enable_iter_perf_stats: bool = False
    enable_iter_req_stats: bool = False


class TrtLlmArgsBase(BaseLlmArgs):
    """The TensorRT backend's (1.0-1.2: gone on main with PR #15918)."""

    spec_backend: ClassVar[str] = "tensorrt"

    build_config: object | None = None
    enable_build_cache: bool = False
    fast_build: bool = False
    normalize_log_probs: bool = False
    extended_runtime_perf_knob_config: object | None = None

    @model_validator(mode="after")
    def _guided_backend(self):
        # _TrtLLM._build_model: only xgrammar drives guided decoding on the TensorRT path
        if self.guided_decoding_backend not in (None, "xgrammar"):
            raise ValueError(
                f"Unsupported guided decoding backend {self.guided_decoding_backend} on the TensorRT backend"
            )
        return self


class ExecutorMemoryType(enum.Enum):
    """The executor's memory pools sleep can release (llmapi/llm_args.py on main, _torch/virtual_memory.py before)."""

    MODEL_WEIGHTS_MAIN = "model_weights_main"
    MODEL_ENGINE_MAIN = "model_engine_main"
    KV_CACHE = "kv_cache"


class SleepConfig(StrictBaseModel):
    """llmapi/llm_args.py on main: what turns sleep on, and how each pool comes back."""

    restore_modes: dict[ExecutorMemoryType, str] | None = None


def release_torch_args(facts, base: type = TorchLlmArgsBase) -> type:
    """The release's TorchLlmArgs: the shared fields plus the facts table's release-specific ones."""
    types = {"SleepConfig": SleepConfig | None}
    fields = {name: (types.get(t, t), default) for name, (t, default) in facts.torch_args.items()}
    return create_model("TorchLlmArgs", __base__=base, __module__="tensorrt_llm.llmapi.llm_args", **fields)
