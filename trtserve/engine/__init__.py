"""The engine contract: the interface every backend implements and everything that crosses it.

    protocol     the Engine interface
    messages     GenerateRequest, TokenDelta, EngineStats; RequestId, SequenceId
    adapters     AdapterRef (a LoRA adapter's name and content hash), LoraConfig (the lora option), PEFT's config
    sampling     SamplingParams, TokenLogprob
    rules        request checks and the finish rule every backend shares; tokenizer + EOS ids
    run_config   RuntimeConfig: engine settings chosen at run time
    layout       the engine dir's files and config.json (EngineConfig)
    model_config ModelConfig: TensorRT-LLM's pretrained_config
    manifest     manifest.json: written by build, verified on every load
    hashing      sha256 of files
    backends     one spec per backend (name, Engine class, platform)
    open         open_engine(engine_dir, run_config), preflight(engine_dir)
    errors       UserError, EngineIntegrityError
    config_file  YAML config files and pydantic errors as one sentence

It imports no torch and nothing of trtserve outside this package (tests/unit/test_imports.py).
"""
