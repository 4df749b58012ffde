"""tensorrt_llm/llmapi/llm_args.py as of 1.0 (pydantic, extra="forbid")."""

from pathlib import Path
from typing import ClassVar

from trtllm_fake_core.args import StrictBaseModel, TrtLlmArgsBase, release_kv_cache_config, release_torch_args
from trtllm_fake_core.extra_options import from_dict_table, options_loader
from trtllm_fake_core.facts import FACTS

# instantiate_sampler (tensorrt_llm/_torch/pyexecutor/_util.py, 1.0) uses TRTLLMSampler when
# enable_trtllm_sampler is set, else TorchSampler, which decodes greedily unless enable_mixed_sampler
# is set. Both removed in 1.1. The fields come from the facts table.
TorchLlmArgs = release_torch_args(FACTS["1.0"])
KvCacheConfig = release_kv_cache_config(FACTS["1.0"])  # its fields: the facts row's kv_cache_fields


class TrtLlmArgs(TrtLlmArgsBase):
    pass


# Speculative decoding configs as 1.0's llm_args.py declares them: `decoding_type` is a ClassVar (so
# passing it is an unknown field), the draft dir is `speculative_model_dir`, there is no max_concurrency,
# and NGram's max_matching_ngram_size defaults to 0. NGram, DraftTarget and MTP run on PyTorch only.
class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: int | None = None
    speculative_model_dir: str | Path | None = None

    def supports_backend(self, backend: str) -> bool:
        return True


class EagleDecodingConfig(DecodingBaseConfig):
    eagle_choices: list[list[int]] | None = None
    greedy_sampling: bool | None = True
    posterior_threshold: float | None = None
    use_dynamic_tree: bool | None = False
    dynamic_tree_max_topK: int | None = None  # noqa: N815 - upstream's name
    num_eagle_layers: int | None = None
    max_non_leaves_per_layer: int | None = None
    eagle3_one_model: bool | None = True
    decoding_type: ClassVar[str] = "Eagle"


class NGramDecodingConfig(DecodingBaseConfig):
    max_matching_ngram_size: int = 0
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True
    is_auto_heuristic: bool = False
    decoding_type: ClassVar[str] = "NGram"

    def supports_backend(self, backend: str) -> bool:
        return backend == "pytorch"


class DraftTargetDecodingConfig(DecodingBaseConfig):
    decoding_type: ClassVar[str] = "Draft_Target"

    def supports_backend(self, backend: str) -> bool:
        return backend == "pytorch"


class MTPDecodingConfig(DecodingBaseConfig):
    num_nextn_predict_layers: int = 1
    use_relaxed_acceptance_for_thinking: bool = False
    relaxed_topk: int = 1
    relaxed_delta: float = 0.0
    use_mtp_vanilla: bool = False
    num_nextn_predict_layers_from_model_config: int = 1
    BEGIN_THINKING_PHASE_TOKEN: int = 128798
    END_THINKING_PHASE_TOKEN: int = 128799
    decoding_type: ClassVar[str] = "MTP"

    def supports_backend(self, backend: str) -> bool:
        return backend == "pytorch"


# trtllm-serve's (and Dynamo's) reading of the options YAML: speculative_config through from_dict's table
update_llm_args_with_extra_options = options_loader(
    from_dict_table(
        {
            "NGram": NGramDecodingConfig,
            "DraftTarget": DraftTargetDecodingConfig,
            "Eagle": EagleDecodingConfig,
            "MTP": MTPDecodingConfig,
        }
    )
)
