"""tensorrt_llm/llmapi/llm_args.py on main after PR #15918 (pydantic, extra="forbid"): no TrtLlmArgs,
and TorchLlmArgs without sampler_type (removed by PR #18232, Aug 2026)."""

from pathlib import Path

from pydantic import Field, NonNegativeInt, PositiveInt
from trtllm_fake_core.args import (  # noqa: F401 - ExecutorMemoryType, SleepConfig: llm_args exports them on main
    ExecutorMemoryType,
    SleepConfig,
    StrictBaseModel,
    release_kv_cache_config,
    release_torch_args,
)
from trtllm_fake_core.decoding import decoding_configs
from trtllm_fake_core.extra_options import discriminated_union, options_loader
from trtllm_fake_core.facts import FACTS

TorchLlmArgs = release_torch_args(FACTS["main"])
KvCacheConfig = release_kv_cache_config(FACTS["main"])  # its fields: the facts row's kv_cache_fields


# Speculative decoding configs on main (nvidia.github.io/TensorRT-LLM/1.4.0rc4 llm-api reference):
# `speculative_model` only (no alias read there), max_concurrency > 0, acceptance_rate_window_size /
# acceptance_rate_threshold replace 1.2's acceptance_window / acceptance_length_threshold. Eagle and MTP
# keep 1.2's fields here (not re-read on main); NGram and DraftTarget are what trtserve maps.
class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: NonNegativeInt | None = None
    max_total_draft_tokens: int | None = None
    speculative_model: str | Path | None = None
    moe_backend: str | None = None
    moe_tactic: str | None = None
    max_concurrency: PositiveInt | None = None
    draft_len_schedule: dict[int, int] | None = None
    load_format: str | None = None
    acceptance_rate_window_size: NonNegativeInt | None = None
    acceptance_rate_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    use_rejection_sampling: bool = False
    allow_advanced_sampling: bool = False
    advanced_sampling_mode: str = "FULL"
    enable_penalty: bool = False

    def supports_backend(self, backend: str) -> bool:
        return True


# Eagle, Eagle3, NGram, DraftTarget and MTP: the same on every release from 1.1 (trtllm_fake_core/decoding.py)
EagleDecodingConfig, Eagle3DecodingConfig, NGramDecodingConfig, DraftTargetDecodingConfig, MTPDecodingConfig = (
    decoding_configs(DecodingBaseConfig, "speculative_model")
)


class NGramDecodingConfig(NGramDecodingConfig):  # main adds spec_dec_variant
    spec_dec_variant: PositiveInt = 1


# trtllm-serve's (and Dynamo's) reading of the options YAML: speculative_config through the SpeculativeConfig
# discriminated union (DraftTarget's Literal is "Draft_Target")
update_llm_args_with_extra_options = options_loader(
    discriminated_union(
        DraftTargetDecodingConfig, Eagle3DecodingConfig, EagleDecodingConfig, MTPDecodingConfig, NGramDecodingConfig
    )
)
