"""The engine dir's files, shared by the builder that writes them and the loaders that read them.

ENGINE_DIR/
  config.json                 TensorRT-LLM engine layout: version, pretrained_config, build_config
  checkpoint/config.json      TensorRT-LLM unified checkpoint (input to trtllm-build)
  checkpoint/rank{r}.safetensors
  model.safetensors           torch-engine weights: fused, cast, rank 0 of tp=1
  tokenizer/                  tokenizer files and chat template
  lora/NAME/                  torch: PEFT LoRA adapters packed by `build --lora NAME=DIR`, served under NAME
  pooling.safetensors         torch, a pooling model with a head: its classifier or reranker rows (docs/pooling.md)
  vision.safetensors          torch, a vision-language model: its vision tower and projector (docs/vision.md)
  manifest.json               sha256 of every file, source fingerprint, toolchain, build config
  engine/                     backend tensorrt: what `trtllm-build` writes (config.json, rank{r}.engine)
  hf/                         backend trtllm: the Hugging Face checkpoint TensorRT-LLM's PyTorch backend loads
  llm_api_options.yaml        tensorrt / trtllm: the LLM-API options (`trtllm-serve --extra_llm_api_options`)
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from trtserve.engine.errors import EngineIntegrityError
from trtserve.engine.model_config import ModelConfig

ENGINE_CONFIG = "config.json"
CHECKPOINT_DIR = "checkpoint"
ENGINE_WEIGHTS = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
TRT_ENGINE_DIR = "engine"
HF_DIR = "hf"
OPTIONS_FILE = "llm_api_options.yaml"
LORA_DIR = "lora"
POOLING_WEIGHTS = "pooling.safetensors"  # a pooling model's head (engine/pooling.py), beside model.safetensors
VISION_WEIGHTS = "vision.safetensors"  # a vision-language model's tower and projector (engine/vision.py)


def rank_file(rank: int) -> str:
    return f"{CHECKPOINT_DIR}/rank{rank}.safetensors"


class PluginConfig(BaseModel):
    tokens_per_block: int
    paged_kv_cache: bool = True
    remove_input_padding: bool = True
    context_fmha: bool = True
    use_paged_context_fmha: bool = True
    gpt_attention_plugin: str = "auto"


class EngineBuildConfig(BaseModel):
    """TensorRT-LLM's build_config section, with the limits the engine was built for."""

    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    max_beam_width: int = 1
    kv_cache_type: str = "PAGED"
    plugin_config: PluginConfig

    def batch_limit(self, run_limit: int | None = None) -> int:
        """Sequences in one engine step: the run config's max_batch_size (None: none), capped by the build's."""
        return min(run_limit or self.max_batch_size, self.max_batch_size)


class EngineConfig(BaseModel):
    version: str  # the toolchain that built it
    pretrained_config: ModelConfig
    build_config: EngineBuildConfig


def read_engine_config(engine_dir: Path) -> EngineConfig:
    path = engine_dir / ENGINE_CONFIG
    try:
        return EngineConfig.model_validate(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValidationError) as err:
        raise EngineIntegrityError(
            f"{path} is unreadable ({type(err).__name__}); rebuild the engine with `trtserve build ... --force`"
        ) from None
