"""The TensorRT-LLM backend: TensorRT-LLM's in-flight batcher behind our Engine interface.

`tensorrt_llm` is imported only inside functions (install.import_tensorrt_llm), so everything
here except `engine.TrtllmEngine` runs on a CPU machine without it. The modules:

    install      the install command, the lazy import, the installed versions and GPU
    quant        the unified checkpoint's `quantization` section, checked
    build_plan   our build limits -> TensorRT-LLM BuildConfig / PluginConfig and `trtllm-build` argv
    serve_plan   -> LLM-API options (the `--extra_llm_api_options` YAML) and `trtllm-serve` argv
    sampling     our SamplingParams -> TensorRT-LLM SamplingParams keyword arguments
    outputs      TensorRT-LLM streamed outputs -> our TokenDelta (finish reasons mapped)
    stats        TensorRT-LLM iteration stats -> our EngineStats
    compat       the manifest vs the installed TensorRT / TensorRT-LLM / GPU
    engine       the Engine over the LLM API (`generate_async(streaming=True)`)

Two build targets (chosen by `trtserve build --backend`):
    tensorrt  TensorRT engines from `trtllm-build` (TensorRT-LLM <= 1.2)
    trtllm    the HF checkpoint + LLM-API options for TensorRT-LLM's PyTorch backend (>= 1.0)
"""

BACKENDS = ("tensorrt", "trtllm")
