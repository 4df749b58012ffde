"""Speculative-decoding configs as TensorRT-LLM's llm_args.py declares them from 1.1 on.

The subclasses (Eagle, Eagle3, NGram, DraftTarget, MTP) and their validators are the same on 1.1, 1.2
and main; what differs is each release's DecodingBaseConfig (its fields, and the name of the draft
checkpoint's field, `speculative_model_dir` on 1.1, `speculative_model` after). So a release declares
its base and gets the rest from `decoding_configs`. `decoding_type` is a Literal field; NGram and
DraftTarget need max_draft_len > 0, DraftTarget and Eagle a draft model; NGram and MTP run on PyTorch
only, DraftTarget also on _autodeploy.
"""

from __future__ import annotations

from typing import Literal

from pydantic import PositiveInt, model_validator


def decoding_configs(base: type, draft_field: str) -> tuple[type, ...]:
    """The release's Eagle, Eagle3, NGram, DraftTarget and MTP config classes, on `base` (its DecodingBaseConfig); `draft_field` names
    the draft checkpoint's field there."""

    def draft(cfg) -> object:
        return getattr(cfg, draft_field)

    class EagleDecodingConfig(base):
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
            if draft(self) is None:
                raise ValueError("Draft model must be provided for EAGLE")
            return self

    class Eagle3DecodingConfig(EagleDecodingConfig):
        decoding_type: Literal["Eagle3"] = "Eagle3"

    class NGramDecodingConfig(base):
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

    class DraftTargetDecodingConfig(base):
        decoding_type: Literal["Draft_Target"] = "Draft_Target"

        @model_validator(mode="after")
        def _draft_target(self):
            if self.max_draft_len is None or self.max_draft_len <= 0:
                raise ValueError("max_draft_len must be > 0 for DraftTarget")
            if draft(self) is None:
                raise ValueError("speculative_model must be specified for DraftTarget")  # 1.1's words too
            return self

        def supports_backend(self, backend: str) -> bool:
            return backend in ("pytorch", "_autodeploy")

    class MTPDecodingConfig(base):
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

    return EagleDecodingConfig, Eagle3DecodingConfig, NGramDecodingConfig, DraftTargetDecodingConfig, MTPDecodingConfig
