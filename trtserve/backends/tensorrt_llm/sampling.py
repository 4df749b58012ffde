"""Our SamplingParams -> keyword arguments of TensorRT-LLM's `SamplingParams` (LLM API).

Field names from `tensorrt_llm/sampling_params.py` of TensorRT-LLM 1.0.0rc4 (fact sheet 3b).
What stays ours (the shared serving code does it for every backend): stop strings,
detokenization, skip_special_tokens, admission, deadlines. What TensorRT-LLM cannot do the way
we define it is refused with a UserError (HTTP 400) naming the field, before anything is queued.

Guided decoding maps onto `tensorrt_llm.llmapi.GuidedDecodingParams(json= | json_object= | regex= |
grammar=)` (1.0 to main), which TensorRT-LLM honours only when its LLM was created with
`guided_decoding_backend` ("xgrammar"): without it the request is refused here, not ignored there.
"""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.sampling import GuidedDecoding, SamplingParams

# ours -> why the tensorrt_llm backend refuses it when set to anything but its default
UNSUPPORTED = {
    "prompt_logprobs": "prompt logprobs are not mapped by the tensorrt_llm backend",
    "bad_words_ids": "only single-token bad words are supported by the tensorrt_llm backend (bad_token_ids)",
    "priority": "request priority is not supported by the tensorrt_llm backend",
    "cache_salt": "cache_salt is not supported by the tensorrt_llm backend",
    # TensorRT-LLM's prefix reuse cannot be keyed by them, so a stale prefix could be reused
    "cache_namespace": "versioned prefix namespaces are not supported by the tensorrt_llm backend",
    "context_version": "versioned prefix namespaces are not supported by the tensorrt_llm backend",
    "seed": "TensorRT-LLM seeds are unsigned 64-bit integers",
    "logit_bias": "logit_bias is not mapped by the tensorrt_llm backend (its SamplingParams has no per-token bias)",
}
GUIDED_BACKEND_KEY = "guided_decoding_backend"  # the LLM-args field that turns guided decoding on
# TensorRT-LLM's SamplingParams raises ValueError for greedy decoding with n (best_of) > 1 unless
# this is set in the server's environment (tensorrt_llm/sampling_params.py, _validate; 1.0 to main).
ALLOW_N_GREEDY_ENV = "TLLM_ALLOW_N_GREEDY_DECODING"


def check_supported(
    request: GenerateRequest, *, allow_n_greedy: bool = False, guided_backend: str | None = None
) -> None:
    """Raise UserError (400) for settings this backend cannot honour.

    allow_n_greedy: the server runs with TLLM_ALLOW_N_GREEDY_DECODING set.
    guided_backend: the LLM's guided_decoding_backend ("xgrammar" | "llguidance"); None: not enabled.
    """
    p = request.params
    if p.guided is not None and guided_backend is None:
        raise UserError(
            f"guided decoding ({p.guided.kind}: response_format, guided_*, or tool_choice required/named) needs "
            f"TensorRT-LLM started with {GUIDED_BACKEND_KEY}: xgrammar in the engine dir's LLM-API options; "
            "add it there, or serve a torch engine"
        )
    if p.n > 1 and p.greedy and not allow_n_greedy:
        raise UserError(
            f"n={p.n} with greedy decoding (temperature 0 or top_k 1) is refused by TensorRT-LLM, as every "
            f"sequence would be the same; set temperature > 0, or n=1, or start the server with {ALLOW_N_GREEDY_ENV}=1"
        )

    def refuse(name: str) -> None:
        raise UserError(f"{name}: {UNSUPPORTED[name]}; leave it unset or serve a torch engine")

    if p.prompt_logprobs is not None:
        refuse("prompt_logprobs")
    if any(len(words) != 1 for words in p.bad_words_ids):
        refuse("bad_words_ids")
    if request.options.priority != 0.0:
        refuse("priority")
    if request.options.cache_salt is not None:
        refuse("cache_salt")
    for name in ("cache_namespace", "context_version"):
        if getattr(request.options, name) is not None:
            refuse(name)
    if p.seed is not None and not 0 <= p.seed < 2**64:
        refuse("seed")
    if p.logit_bias:
        refuse("logit_bias")


def to_trtllm_sampling(p: SamplingParams, eos_token_ids: list[int]) -> dict:
    """kwargs for `tensorrt_llm.SamplingParams(**kwargs)`; only fields that differ from neutral are set.

    eos_token_ids: the tokenizer's EOS first; the first is `end_id`, the others stop like EOS.
    """
    kw: dict = {
        "max_tokens": p.max_tokens,
        "n": p.n,
        "detokenize": False,  # our detokenizer and stop strings run on the token ids
        "include_stop_str_in_output": True,  # keep the stop token in token_ids, as the torch engine does
    }
    if eos_token_ids:
        kw["end_id"] = kw["pad_id"] = eos_token_ids[0]
    stop_ids = list(p.stop_token_ids)
    if not p.ignore_eos:
        stop_ids += [t for t in eos_token_ids[1:] if t not in stop_ids]
    if stop_ids:
        kw["stop_token_ids"] = stop_ids
    if p.ignore_eos:
        kw["ignore_eos"] = True
    if p.min_tokens:
        kw["min_tokens"] = p.min_tokens
    if p.greedy:
        kw["top_k"] = 1  # greedy in every TensorRT-LLM sampler
    else:
        kw["temperature"] = p.temperature
        kw["top_p"] = p.top_p  # set even at 1.0: without top_k/top_p TensorRT-LLM's TRT path decodes greedily
        if p.top_k:
            kw["top_k"] = p.top_k
        if p.min_p:
            kw["min_p"] = p.min_p
    if p.repetition_penalty != 1.0:
        kw["repetition_penalty"] = p.repetition_penalty
    if p.presence_penalty:
        kw["presence_penalty"] = p.presence_penalty
    if p.frequency_penalty:
        kw["frequency_penalty"] = p.frequency_penalty
    if p.seed is not None:
        kw["seed"] = p.seed
    if p.bad_words_ids:
        kw["bad_token_ids"] = [words[0] for words in p.bad_words_ids]
    if p.logprobs is not None:
        kw["logprobs"] = max(p.logprobs, 1)  # TensorRT-LLM returns the sampled token among its top-k
    if p.guided is not None:
        kw["guided_decoding"] = guided_decoding_kwargs(p.guided)  # the caller builds GuidedDecodingParams
    return kw


def guided_decoding_kwargs(g: GuidedDecoding) -> dict:
    """kwargs for `tensorrt_llm.llmapi.GuidedDecodingParams(**kwargs)`: one of json (a schema as
    text), json_object, regex, grammar (EBNF, xgrammar's dialect as ours). A choice is a grammar."""
    import json

    if g.kind == "json_schema":
        return {"json": g.spec}
    if g.kind == "json_object":
        return {"json_object": True}
    if g.kind == "regex":
        return {"regex": g.spec}
    if g.kind == "choice":
        return {"grammar": "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in json.loads(g.spec))}
    return {"grammar": g.spec}
