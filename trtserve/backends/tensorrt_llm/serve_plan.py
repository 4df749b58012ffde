"""LLM-API options for TensorRT-LLM (the `--extra_llm_api_options` YAML) and `trtllm-serve` argv.

Keys follow `tensorrt_llm/llmapi/llm_args.py` of TensorRT-LLM 1.0 (TorchLlmArgs: kv_cache_config,
max_batch_size, max_num_tokens, max_seq_len, enable_chunked_prefill, cuda_graph_config,
enable_iter_perf_stats) and the trtllm-serve options of the 1.0 docs. Pure functions.
"""

from __future__ import annotations

from trtserve.backends.tensorrt_llm.quant import llmapi_kv_dtype, quant_algos
from trtserve.engine.errors import UserError
from trtserve.engine.layout import EngineBuildConfig

KV_FRACTION = 0.9  # TensorRT-LLM's default share of free GPU memory for the KV cache (must be < 1)


def llm_api_options(limits: EngineBuildConfig, quantization: dict | None) -> dict:
    """The options YAML of a `--backend trtllm` engine dir (PyTorch backend, TensorRT-LLM >= 1.0)."""
    _, kv_algo = quant_algos(quantization)
    kv = {"enable_block_reuse": True, "free_gpu_memory_fraction": KV_FRACTION}
    if kv_algo is not None:
        dtype = llmapi_kv_dtype(kv_algo)  # KvCacheConfig.dtype (PyTorch backend) has no int8
        if dtype is None:
            raise UserError(
                f"a {kv_algo} KV cache is not available on TensorRT-LLM's PyTorch backend; "
                "use an FP8 KV cache or build with --backend tensorrt"
            )
        kv["dtype"] = dtype
    return {
        "max_batch_size": limits.max_batch_size,
        "max_num_tokens": limits.max_num_tokens,
        "max_seq_len": limits.max_seq_len,
        "enable_chunked_prefill": True,
        "kv_cache_config": kv,
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": limits.max_batch_size},
        "enable_iter_perf_stats": True,  # iteration stats (get_stats, /metrics) need it on the PyTorch backend
    }


def tensorrt_runtime_options(limits: EngineBuildConfig) -> dict:
    """LLM-API options for a TensorRT engine (the limits are baked into the engine; the KV cache is not)."""
    return {"kv_cache_config": {"enable_block_reuse": True, "free_gpu_memory_fraction": KV_FRACTION}}


def apply_runtime(
    options: dict,
    *,
    kv_cache_tokens: int | None,
    enable_prefix_caching: bool,
    max_batch_size: int | None = None,
    max_num_tokens: int | None = None,
) -> dict:
    """Our `trtserve run` settings on top of the built options: a KV budget in tokens, prefix reuse,
    and lower batch limits (a TensorRT engine cannot go above the limits it was built with)."""
    out = {**options, "kv_cache_config": dict(options.get("kv_cache_config", {}))}
    out["kv_cache_config"]["enable_block_reuse"] = enable_prefix_caching
    if kv_cache_tokens is not None:
        out["kv_cache_config"]["max_tokens"] = kv_cache_tokens  # the smaller of this and the fraction wins
    for key, value in (("max_batch_size", max_batch_size), ("max_num_tokens", max_num_tokens)):
        if value is not None:
            out[key] = min(value, options.get(key, value))
    return out


def trtllm_serve_argv(
    backend: str, model_dir: str, tokenizer_dir: str, options_file: str | None, tp_size: int = 1
) -> list[str]:
    """The equivalent `trtllm-serve` command for an engine dir (TensorRT-LLM >= 1.0 flags).

    backend "trtllm": MODEL is the HF checkpoint and the limits live in the options YAML;
    backend "tensorrt": MODEL is the TensorRT engine dir (before 1.0, leave out `--backend tensorrt`).
    """
    argv = ["trtllm-serve", model_dir, "--backend", "pytorch" if backend == "trtllm" else "tensorrt"]
    argv += ["--tokenizer", tokenizer_dir, "--host", "127.0.0.1", "--port", "8000", "--tp_size", str(tp_size)]
    if options_file is not None:
        argv += ["--extra_llm_api_options", options_file]
    return argv
