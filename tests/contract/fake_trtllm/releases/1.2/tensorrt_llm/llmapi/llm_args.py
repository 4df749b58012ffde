"""tensorrt_llm/llmapi/llm_args.py as of 1.2 (pydantic, extra="forbid")."""

from pathlib import Path

from pydantic import AliasChoices, Field, NonNegativeFloat, NonNegativeInt
from trtllm_fake_core.args import StrictBaseModel, TrtLlmArgsBase, release_kv_cache_config, release_torch_args
from trtllm_fake_core.decoding import decoding_configs
from trtllm_fake_core.extra_options import discriminated_union, options_loader
from trtllm_fake_core.facts import FACTS

# sampler_type replaced enable_trtllm_sampler / enable_mixed_sampler in 1.1; "auto" is TorchSampler unless
# beam search is asked for, and it honours each request's sampling settings. Removed on main (PR #18232).
TorchLlmArgs = release_torch_args(FACTS["1.2"])
KvCacheConfig = release_kv_cache_config(FACTS["1.2"])  # its fields: the facts row's kv_cache_fields


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


# Eagle, Eagle3, NGram, DraftTarget and MTP: the same on every release from 1.1 (trtllm_fake_core/decoding.py)
EagleDecodingConfig, Eagle3DecodingConfig, NGramDecodingConfig, DraftTargetDecodingConfig, MTPDecodingConfig = (
    decoding_configs(DecodingBaseConfig, "speculative_model")
)


# trtllm-serve's (and Dynamo's) reading of the options YAML: speculative_config through the SpeculativeConfig
# discriminated union (DraftTarget's Literal is "Draft_Target")
update_llm_args_with_extra_options = options_loader(
    discriminated_union(
        DraftTargetDecodingConfig, Eagle3DecodingConfig, EagleDecodingConfig, MTPDecodingConfig, NGramDecodingConfig
    )
)
