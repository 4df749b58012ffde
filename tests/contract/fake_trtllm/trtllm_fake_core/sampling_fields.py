"""The fields of tensorrt_llm.SamplingParams (1.0.0rc4, fact sheet 3b): the fake refuses any other.

No imports: tests/unit/test_trtllm_mapping.py loads this file by path as its reference list.
"""

SAMPLING_FIELDS = frozenset(
    [
        "max_tokens",
        "end_id",
        "pad_id",
        "stop",
        "stop_token_ids",
        "include_stop_str_in_output",
        "bad",
        "bad_token_ids",
        "n",
        "best_of",
        "use_beam_search",
        "top_k",
        "top_p",
        "temperature",
        "seed",
        "min_tokens",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "length_penalty",
        "logprobs",
        "prompt_logprobs",
        "return_context_logits",
        "return_generation_logits",
        "exclude_input_from_output",
        "return_perf_metrics",
        "guided_decoding",
        "ignore_eos",
        "detokenize",
        "skip_special_tokens",
        "add_special_tokens",
        "truncate_prompt_tokens",
    ]
)
