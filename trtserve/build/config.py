"""The build configuration: every `trtserve build` flag, also loadable from a YAML preset."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trtserve.errors import UserError
from trtserve.quant.formats import GroupSize, KVQuantName, QuantName

DType = Literal["auto", "bfloat16", "float16", "float32"]
Backend = Literal["torch", "tensorrt", "trtllm"]  # tensorrt: TRT engines (TRT-LLM <= 1.2); trtllm: its PyTorch backend


class BuildConfig(BaseModel):
    """What to build and the limits the engine is built for (TensorRT-LLM's BuildConfig names)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # HF dir, GGUF file or alias; the CLI argument wins
    dtype: DType = "auto"
    tp_size: int = Field(1, ge=1, le=64)
    max_batch_size: int = Field(256, ge=1)
    max_seq_len: int | None = Field(None, ge=2)  # None: the model's max_position_embeddings
    max_num_tokens: int = Field(8192, ge=1)  # tokens one engine step may process
    tokens_per_block: int = Field(32, ge=1, le=1024)
    backend: Backend = "torch"
    # Quantization through NVIDIA ModelOpt (trtserve/quant/formats.py); None = unquantized.
    quant: QuantName | None = None
    kv_cache_quant: KVQuantName | None = None
    calib_size: int = Field(32, ge=1)  # calibration windows
    calib_seq_len: int = Field(256, ge=8)  # tokens per window
    calib_data: Path | None = None  # TXT or JSONL; None = docstrings of the Python standard library
    group_size: GroupSize = 128  # inputs per int4 scale (w4a16, w4a16_awq)
    smoothquant_alpha: float | None = Field(None, ge=0.0, le=1.0)  # w8a8_sq migration strength; None = 0.5

    @field_validator("tokens_per_block")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"must be a power of two (e.g. 16, 32, 64), got {v}")
        return v


def describe_validation_error(err: ValidationError, source: str, model: type[BaseModel] | None = None) -> str:
    """One sentence naming each bad field and why, for a pydantic error."""
    parts = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "config"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            allowed = ", ".join((model or BuildConfig).model_fields)
            msg = f"unknown key (allowed: {allowed})"
        elif e["type"] == "literal_error":
            msg = f"got {e.get('input')!r}; {msg[0].lower()}{msg[1:]}"
        parts.append(f"'{field}': {msg}")
    return f"invalid {source}: " + "; ".join(parts)


def load_build_config(path: Path | None, overrides: dict) -> BuildConfig:
    """Merge a YAML preset (if any) with CLI overrides (None = not given) and validate."""
    data: dict = {}
    if path is not None:
        data = read_yaml(path)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return BuildConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(describe_validation_error(err, "build config")) from None


def read_yaml(path: Path) -> dict:
    """Read a YAML mapping, turning every failure into a UserError naming the file."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UserError(f"cannot read config file {path}: {err.strerror}; check the path") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise UserError(f"config file {path} is not valid YAML ({problem}{where}); fix its syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data
