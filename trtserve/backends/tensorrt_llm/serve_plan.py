"""LLM-API options for TensorRT-LLM (the `--extra_llm_api_options` YAML), fitted to a release, and
the `trtllm-serve` line. Pure functions over a `Capabilities` (capabilities.py).

Keys follow `tensorrt_llm/llmapi/llm_args.py` (TorchLlmArgs: kv_cache_config, max_batch_size,
max_num_tokens, max_seq_len, enable_chunked_prefill, cuda_graph_config, enable_iter_perf_stats,
present in 1.0 through main); LLM args are pydantic models with extra="forbid" in every release,
so a key the installed release lacks makes `LLM(...)` raise. Release-specific keys come only from
the capabilities: 1.0's PyTorch backend samples greedily unless `enable_trtllm_sampler` is set, and
1.1 and later refuse that key.
"""

from __future__ import annotations

from trtserve.backends.tensorrt_llm.capabilities import (
    RELEASE_SPECIFIC_ARGS,
    SAMPLER_SWITCH,
    SLEEP_ARGS,
    Capabilities,
)
from trtserve.backends.tensorrt_llm.kv_offload import host_tier
from trtserve.backends.tensorrt_llm.logprobs import GATHER_KEY
from trtserve.backends.tensorrt_llm.lora import check_fields
from trtserve.backends.tensorrt_llm.quant import llmapi_kv_dtype, quant_algos
from trtserve.backends.tensorrt_llm.speculative import SPEC_OPTION
from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.layout import EngineBuildConfig

KV_FRACTION = 0.9  # TensorRT-LLM's default share of free GPU memory for the KV cache (must be < 1)
TOKENS_PER_BLOCK = 32  # the PyTorch backend's KV block size unless kv_cache_config.tokens_per_block says
# the sleep switches trtserve sets: main's sleep_config; not 1.1-1.2's enable_sleep, which upstream runs
# only without CUDA graphs
SLEEP_BY_DEFAULT = frozenset({"sleep_config"})


def llm_api_options(
    limits: EngineBuildConfig,
    quantization: dict | None,
    caps: Capabilities,
    lora: dict | None = None,
    speculative: dict | None = None,
) -> dict:
    """The options YAML of a `--backend trtllm` engine dir, for the release `caps` describes.
    lora: the `lora_config` LLM argument (lora.lora_config_options) when adapters are served;
    speculative: `speculative_config` (speculative.speculative_options) when it speculates."""
    _, kv_algo = quant_algos(quantization)
    kv = {"enable_block_reuse": True, "free_gpu_memory_fraction": KV_FRACTION}
    if kv_algo is not None:
        dtype = llmapi_kv_dtype(kv_algo)  # KvCacheConfig.dtype (PyTorch backend) has no int8
        if dtype is None:
            raise UserError(
                f"a {kv_algo} KV cache is not available on TensorRT-LLM's PyTorch backend; "
                "use an FP8 KV cache or build with --backend tensorrt"
            )
        if dtype != "auto":  # "auto": TensorRT-LLM takes it from the checkpoint's quantization config
            kv["dtype"] = dtype
    kv |= block_size(limits.plugin_config.tokens_per_block, caps)
    options = {
        "max_batch_size": limits.max_batch_size,
        "max_num_tokens": limits.max_num_tokens,
        "max_seq_len": limits.max_seq_len,
        "enable_chunked_prefill": True,
        "kv_cache_config": kv,
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": limits.max_batch_size},
        "enable_iter_perf_stats": True,  # iteration stats (get_stats, /metrics) need it on the PyTorch backend
    }
    if lora is not None:
        check_fields(lora, caps.lora_fields, caps.label)
        options["lora_config"] = lora
    if speculative is not None:
        options[SPEC_OPTION] = speculative
    if caps.sleep_arg in SLEEP_BY_DEFAULT:  # sleep / wake-up (sleep.py) at no cost to CUDA graphs
        options[caps.sleep_arg] = SLEEP_ARGS[caps.sleep_arg]
    return {**options, **sampler_options(caps)}


def block_size(tokens_per_block: int, caps: Capabilities) -> dict:
    """`kv_cache_config` fields that make the PyTorch backend's KV blocks `tokens_per_block` tokens long (the
    block size the engine dir records and Dynamo's router is told); UserError where the release cannot."""
    if tokens_per_block == TOKENS_PER_BLOCK:
        return {}  # every release's default: nothing written, so any release loads the YAML
    if not caps.kv_tokens_per_block:
        raise UserError(
            f"--tokens-per-block {tokens_per_block} cannot be applied on {caps.label}: its KvCacheConfig has no "
            f"tokens_per_block, so TensorRT-LLM would run {TOKENS_PER_BLOCK}-token blocks; build without "
            "--tokens-per-block, or for TensorRT-LLM 1.1 or later"
        )
    return {"tokens_per_block": tokens_per_block}


def sampler_options(caps: Capabilities) -> dict:
    """The keys that make the PyTorch backend honour per-request sampling settings, if it needs any."""
    return {SAMPLER_SWITCH: True} if SAMPLER_SWITCH in caps.torch_args else {}


def tensorrt_runtime_options(limits: EngineBuildConfig, lora: dict | None = None, plugin: dict | None = None) -> dict:
    """LLM-API options for a TensorRT engine (the limits are baked into the engine; the KV cache is not).
    lora: `lora_config` for an engine built with the LoRA plugin (it sizes TensorRT-LLM's adapter cache);
    plugin: the engine's plugin_config as built (None: the limits' own).

    With paged context FMHA the engine takes chunked context, so prompts up to max_seq_len - 1 run (without
    it TensorRT-LLM caps them at min(max_seq_len - 1, max_num_tokens)); without it neither chunked
    context nor KV block reuse works (trtGptModelInflightBatching.cpp), so both are off.
    gather_generation_logits is on so that logprobs work (logprobs.py says what it costs)."""
    paged = paged_context_fmha(plugin if plugin is not None else limits.plugin_config.model_dump())
    kv = {"enable_block_reuse": paged, "free_gpu_memory_fraction": KV_FRACTION}
    # logprobs on the TensorRT path need it (logprobs.py): a batch x vocab logits buffer, copied out only
    # for the requests that ask for logprobs
    options = {"kv_cache_config": kv, "enable_chunked_prefill": paged, GATHER_KEY: True}
    return options if lora is None else {**options, "lora_config": lora}


def paged_context_fmha(plugin: dict) -> bool:
    return bool(plugin.get("context_fmha", True) and plugin.get("use_paged_context_fmha", True))


def max_input_tokens(max_seq_len: int, max_num_tokens: int, chunked: bool) -> int:
    """The longest prompt TensorRT-LLM's TensorRT path takes (cpp/.../trtGptModel.h)."""
    return max_seq_len - 1 if chunked else min(max_seq_len - 1, max_num_tokens)


def fit_options(options: dict, backend: str, caps: Capabilities, options_file: str) -> dict:
    """The engine dir's options, made right for the TensorRT-LLM that will load them.

    The YAML was written for the release planned at build time; the sampler switch is the one key
    known to differ between releases, so it is dropped and re-added as this release needs it. Any
    other key this release lacks (introspected only) is refused here in one sentence instead of as
    a pydantic error from inside TensorRT-LLM.
    """
    out = {k: v for k, v in options.items() if k not in RELEASE_SPECIFIC_ARGS}
    if backend == "trtllm":
        out.update(sampler_options(caps))
        asked = any(options.get(a) not in (None, False) for a in SLEEP_ARGS)
        # sleep kept only where this release has it at no cost (planned for one that has it)
        if asked and caps.sleep_arg in SLEEP_BY_DEFAULT:
            out[caps.sleep_arg] = SLEEP_ARGS[caps.sleep_arg]
    allowed = caps.llm_args(backend)
    unknown = sorted(set(out) - allowed) if caps.introspected else []
    if unknown:
        raise UserError(
            f"{options_file} sets {', '.join(unknown)}, which {caps.label} does not take as an LLM argument; "
            "rebuild the engine dir with `trtserve build ... --force` on this host"
        )
    _check_kv_fields(out.get("kv_cache_config") or {}, caps, options_file)
    if "lora_config" in out:
        check_fields(out["lora_config"], caps.lora_fields, caps.label)
    return out


def _check_kv_fields(kv: dict, caps: Capabilities, options_file: str) -> None:
    """One sentence for a kv_cache_config field this release's KvCacheConfig lacks (it would raise a pydantic
    error from inside TensorRT-LLM)."""
    if "tokens_per_block" in kv and not caps.kv_tokens_per_block:
        raise UserError(
            f"{options_file} sets kv_cache_config.tokens_per_block {kv['tokens_per_block']}, which {caps.label} "
            f"does not take (it runs {TOKENS_PER_BLOCK}-token blocks); rebuild the engine dir with "
            "`trtserve build ... --force` on this host, without --tokens-per-block"
        )
    unknown = sorted(set(kv) - caps.kv_cache_fields) if caps.kv_cache_fields is not None else []
    if unknown:
        raise UserError(
            f"{options_file} sets kv_cache_config.{', kv_cache_config.'.join(unknown)}, which {caps.label}'s "
            "KvCacheConfig does not have; rebuild the engine dir with `trtserve build ... --force` on this host"
        )


def apply_runtime(
    options: dict,
    *,
    kv_cache_tokens: int | None,
    enable_prefix_caching: bool,
    max_batch_size: int | None = None,
    max_num_tokens: int | None = None,
    kv_offload: KVOffloadConfig | None = None,
    logprobs: bool = True,
) -> dict:
    """Our `trtserve run` settings on top of the built options: a KV budget in tokens, prefix reuse
    (never where the built options turned it off: a TensorRT engine without paged context FMHA),
    lower batch limits (a TensorRT engine cannot go above the limits it was built with), the
    second KV tier (kv_offload.py) and, with logprobs False, a TensorRT engine started without
    gather_generation_logits (logprobs.py says what it costs; logprobs are then refused)."""
    out = {**options, "kv_cache_config": dict(options.get("kv_cache_config", {}))}
    if not logprobs and out.get(GATHER_KEY):
        out[GATHER_KEY] = False
    built_reuse = bool(out["kv_cache_config"].get("enable_block_reuse", True))
    out["kv_cache_config"]["enable_block_reuse"] = enable_prefix_caching and built_reuse
    if kv_offload is not None:
        out["kv_cache_config"].update(host_tier(kv_offload, out["kv_cache_config"]["enable_block_reuse"]))
    if kv_cache_tokens is not None:
        out["kv_cache_config"]["max_tokens"] = kv_cache_tokens  # the smaller of this and the fraction wins
    for key, value in (("max_batch_size", max_batch_size), ("max_num_tokens", max_num_tokens)):
        if value is not None:
            out[key] = min(value, options.get(key, value))
    return out


def serve_backend(caps: Capabilities, backend: str) -> str:
    """The `trtllm-serve --backend` value for our backend on this release (`trt` on 1.0, `tensorrt` after)."""
    if backend == "trtllm":
        return "pytorch"  # the default of every 1.x, named so the line reads the same everywhere
    for name in ("tensorrt", "trt"):
        if name in caps.serve_backends:
            return name
    raise UserError(
        f"{caps.label} has no TensorRT backend (trtllm-serve --backend takes {', '.join(caps.serve_backends)}); "
        "serve TensorRT engines with TensorRT-LLM 1.0-1.2, or rebuild with --backend trtllm"
    )


def trtllm_serve_argv(
    caps: Capabilities, backend: str, model_dir: str, tokenizer_dir: str, options_file: str | None, tp_size: int = 1
) -> list[str]:
    """The equivalent `trtllm-serve` command for an engine dir on the release `caps` describes.

    backend "trtllm": MODEL is the HF checkpoint and the limits live in the options YAML;
    backend "tensorrt": MODEL is the TensorRT engine dir.
    """
    argv = ["trtllm-serve", model_dir, "--backend", serve_backend(caps, backend)]
    argv += ["--tokenizer", tokenizer_dir, "--host", "127.0.0.1", "--port", "8000", "--tp_size", str(tp_size)]
    if options_file is not None:
        argv += ["--extra_llm_api_options", options_file]
    return argv
