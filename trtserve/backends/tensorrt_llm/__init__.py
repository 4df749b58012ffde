"""The TensorRT-LLM backend: TensorRT-LLM's in-flight batcher behind our Engine interface.

`tensorrt_llm` is imported only inside functions (install.import_tensorrt_llm), so everything
here except `engine.TrtllmEngine` runs on a CPU machine without it. The modules:

    install      the install command, the lazy import, the installed versions and GPU
    capabilities what the TensorRT-LLM in use has (introspected, or a release table for planning);
                 every release-dependent decision below reads it
    quant        the unified checkpoint's `quantization` section, checked
    build_plan   our build limits -> TensorRT-LLM BuildConfig / PluginConfig and `trtllm-build` argv
    builder_rules what trtllm-build's builder.py rewrites (FMHA flags) and refuses (Blackwell), by SM
    serve_plan   -> LLM-API options (the `--extra_llm_api_options` YAML) and `trtllm-serve` argv
    logprobs     which logprobs each backend and release returns, and the 400s for the rest
    kv_offload   the `kv_offload` option -> kv_cache_config's host pool
    sleep        sleep / wake-up over the PyTorch executor's virtual memory (main)
    stats_poller iteration stats one at a time on a thread of their own
    sampling     our SamplingParams -> TensorRT-LLM SamplingParams keyword arguments
    lora         PEFT adapters -> LoraConfig fields, LoRARequest ids, trtllm-build's LoRA flags
    adapters     the adapters one engine serves (packed, from the run config, loaded at run time)
    outputs      TensorRT-LLM streamed outputs -> our TokenDelta (finish reasons mapped)
    stats        TensorRT-LLM iteration stats -> our EngineStats
    compat       which workflows a TensorRT-LLM can build / run; the manifest vs this host
    model_support which release serves which model architecture (MoE, MXFP4, vision): one table
    feature_support the wave's capabilities per release (parsers, Anthropic, tracing, pooling, vision)
    support_doc  both tables rendered for docs/tensorrt-llm.md and `trtserve doctor`
    engine       the Engine over the LLM API (`generate_async(streaming=True)`)
    host         `trtserve doctor`: this host's TensorRT-LLM / TensorRT / CUDA / driver / GPU, and verdicts

Two build targets (chosen by `trtserve build --backend`):
    tensorrt  TensorRT engines from `trtllm-build` (TensorRT-LLM 1.0-1.2 and 1.3.0rc0-rc15; not main)
    trtllm    the HF checkpoint + LLM-API options for TensorRT-LLM's PyTorch backend (>= 1.0, main too)
"""

BACKENDS = ("tensorrt", "trtllm")
