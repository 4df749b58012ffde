"""One facts table per TensorRT-LLM release line: what its source accepts and does, as the fakes need it.

The per-release fakes are generated from these rows (their release-specific LLM-args fields, sampling
checks, logprob and stats behaviour, trtllm-serve options) and tests/contract/test_trtllm_facts.py
checks every fake, and trtserve's own release table (capabilities.RELEASES), against them. Sources:
the fact sheet's sections 10 and 11 (/work/shared/reference/tensorrt-llm-facts.md), each row naming
its upstream file; rows marked "placed by date" were not read in that release's own source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# KvCacheConfig (llmapi, 1.0 to main): the fields the fakes declare, binding order first
# (1.0's; facts rows list each release's)
KV_CACHE_FIELDS = (
    "enable_block_reuse",
    "max_tokens",
    "max_attention_window",
    "sink_token_length",
    "free_gpu_memory_fraction",
    "host_cache_size",
    "onboard_blocks",
    "cross_kv_cache_fraction",
    "secondary_offload_min_priority",
    "event_buffer_max_size",
    "enable_partial_reuse",
    "copy_on_partial_reuse",
    "dtype",
)
# 1.1 adds tokens_per_block (the PyTorch backend's KV block size; placed by content: in the llm_args.py with
# speculative_model_dir and from_dict, absent from 1.0's); main drops onboard_blocks (PR #12449)
KV_CACHE_FIELDS_1_1 = (*KV_CACHE_FIELDS, "tokens_per_block")
KV_CACHE_FIELDS_MAIN = tuple(f for f in KV_CACHE_FIELDS_1_1 if f != "onboard_blocks")
# (field, lower bound exclusive, upper bound exclusive): KvCacheConfig's validators
KV_CACHE_RANGES = (("free_gpu_memory_fraction", 0.0, 1.0),)

# trtllm-serve's options (commands/serve.py, click): destination -> (names, type, default). The first
# name is the one upstream documents; the others are aliases that release accepts.
_SERVE_COMMON: dict[str, tuple[tuple[str, ...], type, object]] = {
    "tokenizer": (("--tokenizer",), str, None),
    "host": (("--host",), str, "localhost"),
    "port": (("--port",), int, 8000),
    "log_level": (("--log_level",), str, "info"),
    "max_beam_width": (("--max_beam_width",), int, 1),
    "max_batch_size": (("--max_batch_size",), int, 2048),
    "max_num_tokens": (("--max_num_tokens",), int, 8192),
    "max_seq_len": (("--max_seq_len",), int, None),
    "tp_size": (("--tp_size",), int, 1),
    "pp_size": (("--pp_size",), int, 1),
    "ep_size": (("--ep_size",), int, None),
    "kv_cache_free_gpu_memory_fraction": (("--kv_cache_free_gpu_memory_fraction",), float, 0.9),
    "num_postprocess_workers": (("--num_postprocess_workers",), int, 0),
    "trust_remote_code": (("--trust_remote_code",), bool, False),
    "extra_llm_api_options": (("--extra_llm_api_options",), str, None),
    "reasoning_parser": (("--reasoning_parser",), str, None),
}
# the 2026 line (fact sheet 11.9): --config is the documented name of the options file, --tp_size an alias
_SERVE_ALIASED = _SERVE_COMMON | {
    "tp_size": (("--tp_size", "--tensor_parallel_size"), int, 1),
    "extra_llm_api_options": (("--config", "--extra_llm_api_options"), str, None),
    "tool_parser": (("--tool_parser",), str, None),
}


# what each line's _torch/models registers (@register_auto_model), for the families trtserve builds and the
# wave's newcomers; read as the fact sheet and docs/source/models/supported-models.md place them: Qwen3 and
# Gemma3 from 0.20, Phi3 from PR #5644 (1.0), gpt-oss from PR #6645 (1.1.0rc0), Gemma2 on 2026 main only.
# Granite and SmolLM3 are AutoDeploy-only upstream; no line has OLMoE, Llava or Idefics3.
PYTORCH_MODELS_1_0 = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Phi3ForCausalLM"}
    | {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "MixtralForCausalLM", "Qwen2MoeForCausalLM"}
    | {"Qwen3MoeForCausalLM"}
)
PYTORCH_MODELS_1_1 = PYTORCH_MODELS_1_0 | {"GptOssForCausalLM"}
PYTORCH_MODELS_MAIN = PYTORCH_MODELS_1_1 | {"Gemma2ForCausalLM"}


@dataclass(frozen=True)
class ReleaseFacts:
    line: str  # "1.0" | "1.1" | "1.2" | "main"
    version: str  # the fake's __version__
    tensorrt_backend: bool  # _tensorrt_engine, TrtLlmArgs, commands/build.py (trtllm-build)
    # release-specific TorchLlmArgs fields: name -> (type, default)
    torch_args: dict[str, tuple[object, object]]
    serve_backends: tuple[str, ...]  # trtllm-serve --backend choices
    serve_aliases: dict[str, str]  # ChoiceWithAlias' aliases (alias -> choice)
    serve_options: dict[str, tuple[tuple[str, ...], type, object]]
    sampling_range_checks: bool  # SamplingParams._validate checks top_p / top_k / temperature ranges
    greedy_rule: str  # "top_k_top_p" (1.0: temperature plays no part) | "implied" (params_imply_greedy_decoding)
    # the PyTorch backend's answer to logprobs=k: "sampled" (its logprob only), "topk" (may miss the
    # sampled token), "topk+sampled"
    torch_logprobs: str
    # get_stats: "blocking" ([] at once while idle; drains until a quiet gap of `timeout`) | "drain"
    stats: str
    sleep_arg: str | None  # the LLM argument that turns sleep / wake-up on
    # get_stats_async: "shared" (executor/result.py IterationResult, 1.0-1.2: one result for every call,
    # created by the first generate_async, done after a wait times out until the next generate_async,
    # fed in bursts 0.2 s apart by the proxy's dispatcher thread; before the first request each call prints
    # "statistics are not available yet") | "per_call" (a fresh drain each call; main, not pinned)
    stats_result: str
    llmapi_exports: frozenset[str] = field(
        default=frozenset({"LLM", "KvCacheConfig", "CudaGraphConfig", "GuidedDecodingParams", "LoRARequest"})
    )
    # the TensorRT path (all releases that have it): logprobs need gather_generation_logits=True; prompts
    # longer than min(max_seq_len - 1, max_num_tokens) fail without chunked context (trtGptModel.h)
    trt_logprobs_need_gather: bool = True
    kv_cache_fields: tuple[str, ...] = KV_CACHE_FIELDS  # llmapi.KvCacheConfig's (the fakes' slice)
    # speculative decoding's acceptance on the PyTorch backend (speculation.py): iteration stats'
    # specDecodingStats filled (py_executor.py _update_iter_stats, PR #9855, merged 2025-12, placed by
    # date), and request_perf_metrics.speculative_decoding filled (executor/result.py, PR #17082, 2026-07-31)
    spec_iteration_stats: bool = True
    spec_request_metrics: bool = False
    pytorch_models: frozenset[str] = PYTORCH_MODELS_1_1  # architectures its PyTorch backend loads (models.py)
    mxfp4_models: frozenset[str] = frozenset({"GptOssForCausalLM"})  # MXFP4 MoE weights (PR #6645, 1.1 on)
    cache_salt: bool = True  # generate_async(cache_salt=...) (fact sheet 11.8: from about 1.1)


FACTS: dict[str, ReleaseFacts] = {
    f.line: f
    for f in (
        ReleaseFacts(
            "1.0",
            "1.0.0",
            True,
            {"enable_trtllm_sampler": (bool, False), "enable_mixed_sampler": (bool, False)},
            ("pytorch", "trt", "_autodeploy"),  # PR #7829 renamed trt -> tensorrt after 1.0 was cut
            {},
            _SERVE_COMMON,
            sampling_range_checks=False,
            greedy_rule="top_k_top_p",
            torch_logprobs="sampled",  # PR #6097: top-k on the TensorRT path only
            stats="blocking",  # executor.py GenerationExecutor.get_stats (fact sheet 10.5)
            sleep_arg=None,
            stats_result="shared",
            spec_iteration_stats=False,
            pytorch_models=PYTORCH_MODELS_1_0,
            mxfp4_models=frozenset(),
            cache_salt=False,
        ),
        ReleaseFacts(
            "1.1",
            "1.1.0",
            True,
            {"sampler_type": (str, "auto"), "enable_sleep": (bool, False)},  # enable_sleep placed by date
            ("pytorch", "tensorrt", "_autodeploy"),  # placed by PR #7829's date
            {},
            _SERVE_COMMON,
            sampling_range_checks=True,
            greedy_rule="implied",
            torch_logprobs="topk",  # PR #7756 in, PR #9374 (sampled token always) not
            stats="blocking",
            sleep_arg="enable_sleep",
            stats_result="shared",
            kv_cache_fields=KV_CACHE_FIELDS_1_1,
            spec_iteration_stats=False,  # PR #9855 is after release/1.1 was cut
        ),
        ReleaseFacts(
            "1.2",
            "1.2.1",
            True,
            {"sampler_type": (str, "auto"), "enable_sleep": (bool, False)},
            ("pytorch", "tensorrt", "_autodeploy"),
            {"trt": "tensorrt"},  # commands/serve.py ChoiceWithAlias
            _SERVE_ALIASED,
            sampling_range_checks=True,
            greedy_rule="implied",
            torch_logprobs="topk+sampled",
            stats="blocking",  # fact sheet 11.6: 1.2 behaves like 1.0
            sleep_arg="enable_sleep",
            stats_result="shared",
            kv_cache_fields=KV_CACHE_FIELDS_1_1,
        ),
        ReleaseFacts(
            "main",
            "1.4.0rc1",
            False,  # PR #15918
            {"sleep_config": ("SleepConfig", None)},  # sampler_type removed (PR #18232)
            ("pytorch", "_autodeploy"),
            {},
            _SERVE_ALIASED,
            sampling_range_checks=True,
            greedy_rule="implied",
            torch_logprobs="topk+sampled",
            stats="drain",  # not pinned on main
            sleep_arg="sleep_config",
            stats_result="per_call",  # not pinned on main
            kv_cache_fields=KV_CACHE_FIELDS_MAIN,
            spec_request_metrics=True,
            pytorch_models=PYTORCH_MODELS_MAIN,
        ),
    )
}
