"""The build configuration: every `trtserve build` flag, also loadable from a YAML preset."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from trtserve.engine.backends import BACKENDS
from trtserve.engine.config_file import describe_validation_error, read_yaml
from trtserve.engine.errors import UserError
from trtserve.engine.pooling import PoolingMethod, PoolingTask
from trtserve.engine.speculative import SpeculativeConfig
from trtserve.models.quant_formats import GROUP_SIZES, kv_cache_names, quant_names

DType = Literal["auto", "bfloat16", "float16", "float32"]
GroupSize = Literal[tuple(sorted(GROUP_SIZES))]  # inputs per int4 scale
NO_QUANT = "none"  # --quant none: unquantized, a GGUF file dequantized (build/gguf_default.py)
KEEP_GGUF = "gguf"  # --quant gguf: a GGUF's own quantization kept (build/gguf_linears.py), its default


def one_of(value, allowed: list) -> object:
    """`value` if it is in `allowed` (read when validating, so formats registered at run time count);
    else the error a Literal gives, which config_file.describe_validation_error words as one sentence."""
    if value is None or value in allowed:
        return value
    *rest, last = allowed
    expected = f"{', '.join(map(repr, rest))} or {last!r}" if rest else repr(last)
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


class BuildConfig(BaseModel):
    """What to build and the limits the engine is built for (TensorRT-LLM's BuildConfig names)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # HF dir, GGUF file or alias; the CLI argument wins
    # weights and activations; auto: config.json's dtype, bfloat16 if quantized; a GGUF: float32 dequantized
    # or kept exactly (Q4_0 / Q4_1 / Q4_K linears), bfloat16 kept with int8 linears (build/gguf_default.py)
    dtype: DType = "auto"
    tp_size: int = Field(1, ge=1, le=64)  # tensor-parallel shards of the TensorRT-LLM checkpoint
    max_batch_size: int = Field(256, ge=1)  # most sequences in one engine step
    max_seq_len: int | None = Field(None, ge=2)  # None: the model's max_position_embeddings
    max_num_tokens: int = Field(8192, ge=1)  # tokens one engine step may process
    tokens_per_block: int = Field(32, ge=1, le=1024)  # KV-cache block size (a power of two)
    backend: str = "torch"  # a name of trtserve/engine/backends.py
    # --backend tensorrt|trtllm: the TensorRT-LLM release line to plan for (X.Y or main, checked by
    # backends/tensorrt_llm/capabilities.py); None: the installed one, else the newest release.
    trtllm_version: str | None = None
    # A --quant / --kv-cache-quant value of trtserve/models/quant_formats.py (ModelOpt, or "gguf": a GGUF's
    # own quantization kept), or "none": unquantized. None: "gguf" for a quantized GGUF where the build can
    # keep it, else unquantized (build/gguf_default.py); a resolved config holds a format name or None.
    quant: str | None = None
    kv_cache_quant: str | None = None
    calib_size: int = Field(32, ge=1)  # calibration windows
    calib_seq_len: int = Field(256, ge=8)  # tokens per window
    calib_data: Path | None = None  # TXT or JSONL; None = docstrings of the Python standard library
    group_size: GroupSize = GROUP_SIZES[0]  # inputs per int4 scale (formats with int4 groups)
    smoothquant_alpha: float | None = Field(None, ge=0.0, le=1.0)  # w8a8_sq migration strength; None = 0.5
    # adapter name -> PEFT LoRA dir, checked against the model and packed into the engine dir (torch, tensorrt, trtllm)
    lora: dict[str, Path] = Field(default_factory=dict)
    # trtllm: speculative decoding written into the options YAML (`speculative_config`); torch: a run-time option
    speculative: SpeculativeConfig | None = None
    # a pooling model (docs/pooling.md): embed | classify | rerank; None: what the checkpoint's architecture
    # names (Qwen3Model: embed, *ForSequenceClassification: classify), else an LLM
    pooling: PoolingTask | None = None
    pooling_method: PoolingMethod = "last"  # embed: the last token's final hidden state, or the prompt's mean
    rerank_tokens: tuple[str, str] = ("yes", "no")  # rerank: the answer tokens whose logits score a pair

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        return one_of(v, list(BACKENDS))

    @field_validator("trtllm_version", mode="before")
    @classmethod
    def _version_is_text(cls, v):
        if isinstance(v, int | float) and not isinstance(v, bool):  # YAML reads 1.0 as a number
            raise ValueError(f'must be quoted, e.g. "{v}" (YAML read it as a number)')
        return v

    @field_validator("quant")
    @classmethod
    def _known_quant(cls, v: str | None) -> str | None:
        return one_of(v, [*quant_names(), NO_QUANT])

    @field_validator("kv_cache_quant")
    @classmethod
    def _known_kv_cache_quant(cls, v: str | None) -> str | None:
        return one_of(v, kv_cache_names())

    @field_validator("tokens_per_block")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"must be a power of two (e.g. 16, 32, 64), got {v}")
        return v


def load_build_config(path: Path | None, overrides: dict) -> BuildConfig:
    """Merge a YAML preset (if any) with CLI overrides (None = not given) and validate."""
    data: dict = {}
    if path is not None:
        data = read_yaml(path)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return BuildConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(describe_validation_error(err, "build config", BuildConfig)) from None
