"""tensorrt_llm/llmapi/llm_args.py as of 1.2 (pydantic, extra="forbid")."""

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator
from trtllm_fake_core.args import StrictBaseModel, TrtLlmArgsBase, release_torch_args
from trtllm_fake_core.facts import FACTS

# sampler_type replaced enable_trtllm_sampler / enable_mixed_sampler in 1.1; "auto" is TorchSampler unless
# beam search is asked for, and it honours each request's sampling settings. Removed on main (PR #18232).
TorchLlmArgs = release_torch_args(FACTS["1.2"])


class TrtLlmArgs(TrtLlmArgsBase):
    pass


# Speculative decoding configs as 1.2's llm_args.py declares them: `decoding_type` is a Literal field,
# the draft dir is `speculative_model` (the old `speculative_model_dir` still accepted as an alias),
# max_concurrency turns speculation off above a batch size. NGram and DraftTarget need max_draft_len > 0,
# DraftTarget a draft model; NGram and MTP run on PyTorch only, DraftTarget also on _autodeploy.
class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: NonNegativeInt | None = None
    max_total_draft_tokens: int | None = None
    speculative_model: str | Path | None = Field(
        default=None, validation_alias=AliasChoices("speculative_model", "speculative_model_dir")
    )
    max_concurrency: NonNegativeInt | None = None
    draft_len_schedule: dict[int, int] | None = None
    load_format: str | None = None
    acceptance_window: NonNegativeInt | None = None
    acceptance_length_threshold: NonNegativeFloat | None = None
    allow_advanced_sampling: bool = False

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
