"""tensorrt_llm/llmapi/llm_args.py on main after PR #15918 (pydantic, extra="forbid"): no TrtLlmArgs,
and TorchLlmArgs without sampler_type (removed by PR #18232, Aug 2026)."""

from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator
from trtllm_fake_core.args import (  # noqa: F401 - ExecutorMemoryType, SleepConfig: llm_args exports them on main
    ExecutorMemoryType,
    SleepConfig,
    StrictBaseModel,
    release_torch_args,
)
from trtllm_fake_core.facts import FACTS

TorchLlmArgs = release_torch_args(FACTS["main"])  # sleep_config; no sampler keys


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


class EagleDecodingConfig(DecodingBaseConfig):
    decoding_type: Literal["Eagle"] = "Eagle"
    eagle_choices: list[list[int]] | None = None
    greedy_sampling: bool | None = True
    posterior_threshold: float | None = None
    use_dynamic_tree: bool | None = False
    dynamic_tree_max_topK: int | None = None  # noqa: N815 - upstream's name
    num_eagle_layers: int | None = None
    max_non_leaves_per_layer: int | None = None
    eagle3_one_model: bool | None = True
    eagle3_layers_to_capture: set[int] | None = None
    eagle3_model_arch: Literal["llama3", "mistral_large3"] = "llama3"

    @model_validator(mode="after")
    def _eagle(self):
        if not self.max_draft_len:
            raise ValueError("max_draft_len must be > 0 for Eagle")
        if self.speculative_model is None:
            raise ValueError("Draft model must be provided for EAGLE")
        return self


class Eagle3DecodingConfig(EagleDecodingConfig):
    decoding_type: Literal["Eagle3"] = "Eagle3"


class NGramDecodingConfig(DecodingBaseConfig):
    spec_dec_variant: PositiveInt = 1
    decoding_type: Literal["NGram"] = "NGram"
    max_matching_ngram_size: PositiveInt = 2
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True

    @model_validator(mode="after")
    def _ngram(self):
        if self.max_draft_len is None or self.max_draft_len <= 0:
            raise ValueError("max_draft_len must be > 0 for NGram")
        return self

    def supports_backend(self, backend: str) -> bool:
        return backend == "pytorch"


class DraftTargetDecodingConfig(DecodingBaseConfig):
    decoding_type: Literal["Draft_Target"] = "Draft_Target"

    @model_validator(mode="after")
    def _draft_target(self):
        if self.max_draft_len is None or self.max_draft_len <= 0:
            raise ValueError("max_draft_len must be > 0 for DraftTarget")
        if self.speculative_model is None:
            raise ValueError("speculative_model must be specified for DraftTarget")
        return self

    def supports_backend(self, backend: str) -> bool:
        return backend in ("pytorch", "_autodeploy")


class MTPDecodingConfig(DecodingBaseConfig):
    decoding_type: Literal["MTP"] = "MTP"
    num_nextn_predict_layers: PositiveInt = 1
    use_relaxed_acceptance_for_thinking: bool = False
    relaxed_topk: int = 1
    relaxed_delta: float = 0.0
    use_mtp_vanilla: bool = False
    mtp_eagle_one_model: bool = True
    num_nextn_predict_layers_from_model_config: int = 1
    begin_thinking_phase_token: int = 128798
    end_thinking_phase_token: int = 128799

    def supports_backend(self, backend: str) -> bool:
        return backend == "pytorch"
