"""The one build planner: `resolve(cfg, strategy)` turns a BuildConfig into a BuildPlan, reading only
the checkpoint's metadata and writing nothing. Every backend's build starts here (build/builder.py),
so the steps below (reader, dtype rule, model config, tp and quant checks, limits) exist once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from trtserve.build.config import KEEP_GGUF, BuildConfig
from trtserve.build.convert import check_tp
from trtserve.build.gguf_default import kept_dtype, resolve_quant
from trtserve.build.job import Job
from trtserve.build.pooling import pooled_model, pooling_config, pooling_reader
from trtserve.build.reader import CheckpointReader
from trtserve.build.source import open_checkpoint
from trtserve.build.vision import vision_config, vision_reader
from trtserve.engine.errors import UserError
from trtserve.engine.layout import EngineBuildConfig, PluginConfig
from trtserve.engine.model_config import Mapping, ModelConfig
from trtserve.engine.pooling import PoolingConfig
from trtserve.engine.vision import VisionConfig
from trtserve.models.quant_formats import by_name, kv_by_name
from trtserve.quant.checks import check_quant

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class BuildPlan:
    """What a build will do; nothing in it is changed once resolved."""

    config: BuildConfig  # resolved: dtype, max_seq_len and the model path filled in
    reader: CheckpointReader
    model: ModelConfig  # the converted model, unquantized (the quantized step returns its own copy)
    limits: EngineBuildConfig
    quantization: dict | None  # the checkpoint's `quantization` as planned (requested, or the source's)
    pooling: PoolingConfig | None = None  # a pooling model's task and head (build/pooling.py); None: an LLM
    vision: VisionConfig | None = None  # a vision-language model's images (build/vision.py); None: text only
    # why a quantized GGUF built without --quant was dequantized (build/gguf_default.py); the build prints it
    dequantized: str | None = None

    @property
    def backend(self) -> str:
        return self.config.backend

    def source(self) -> dict:
        """manifest.json's `source`."""
        r = self.reader
        return {"kind": type(r).__name__, "path": str(r.path), "fingerprint": r.fingerprint()}


class Strategy(Protocol):
    """How one backend (a name of engine/backends.py) turns a plan into an engine dir."""

    name: str
    has_dry_run: bool  # describe() gives the --dry-run lines

    def accept(self, cfg: BuildConfig, reader: CheckpointReader) -> None:
        """Refuse (UserError) what this backend cannot build at all, before anything else is checked."""

    def source_quantization(self, reader: CheckpointReader) -> dict | None:
        """The `quantization` of an unquantized build: the source's own, where this backend keeps it."""

    def check_plan(self, plan: BuildPlan) -> None:
        """Validate the backend's part of the plan (no side effects; run for --dry-run too)."""

    def built_limits(self, limits: EngineBuildConfig, quantization: dict | None) -> EngineBuildConfig:
        """The limits as the built engine will have them (trtllm-build rewrites some plugin flags)."""

    def check_gpu(self, quantization: dict | None, sm: str) -> None:
        """Refuse (UserError) what this backend cannot build for a GPU of compute capability `sm`."""

    def prepare(self, plan: BuildPlan) -> Job:
        """Every check that can fail before anything is written (host, tensors); the job that writes."""

    def describe(self, plan: BuildPlan, out: Path) -> list[str] | None:
        """--dry-run lines after the common header (None where has_dry_run is False)."""

    def is_weights(self, rel: str) -> bool:
        """Whether the engine dir's file `rel` is one the backend loads as weights (`trtserve inspect`)."""


def resolve(cfg: BuildConfig, strategy: Strategy) -> BuildPlan:
    """The plan for `cfg`; UserError for anything that cannot work. `cfg` is not changed."""
    if not cfg.model:
        raise UserError("no MODEL given; pass it as an argument or set `model:` in the --config file")
    reader = vision_reader(cfg, pooling_reader(cfg, open_checkpoint(cfg.model)))
    strategy.accept(cfg, reader)
    cfg, dequantized = resolve_quant(cfg, reader)
    reader.family.check_build(cfg.backend, cfg.quant)
    dtype = resolve_dtype(cfg, reader)
    model = pooled_model(reader.family.model_config(reader.hf_config, dtype), reader)
    model = model.model_copy(update={"mapping": Mapping(world_size=cfg.tp_size, tp_size=cfg.tp_size)})
    check_tp(model, cfg.tp_size)
    check_quant(model, cfg)
    quantization = requested_quantization(cfg) if cfg.quant else strategy.source_quantization(reader)
    limits = strategy.built_limits(resolve_limits(cfg, model), quantization)
    resolved = cfg.model_copy(update={"dtype": dtype, "max_seq_len": limits.max_seq_len, "model": str(reader.path)})
    pooling = pooling_config(cfg, reader, model)
    plan = BuildPlan(resolved, reader, model, limits, quantization, pooling, vision_config(reader), dequantized)
    strategy.check_plan(plan)
    return plan


def resolve_dtype(cfg: BuildConfig, reader: CheckpointReader) -> str:
    """--dtype, with `auto` resolved from the source; a quantized build keeps its unquantized tensors
    in 16 bits, so `auto` resolving to float32 becomes bfloat16 there, except a kept GGUF that maps
    exactly (build/gguf_default.py). `cfg.quant` is resolved (gguf_default.resolve_quant)."""
    if cfg.dtype != "auto":
        return cfg.dtype
    if cfg.quant == KEEP_GGUF:
        return kept_dtype(reader)
    if cfg.quant and reader.auto_dtype == "float32":
        return "bfloat16"
    return reader.auto_dtype


def resolve_limits(cfg: BuildConfig, model: ModelConfig) -> EngineBuildConfig:
    limit = model.max_position_embeddings
    scaling = model.rotary_scaling or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        limit = int(limit * float(scaling.get("factor", 1.0)))
    max_seq_len = cfg.max_seq_len or limit
    if max_seq_len > limit:
        raise UserError(f"--max-seq-len {max_seq_len} exceeds the model's context of {limit} tokens; lower it")
    return EngineBuildConfig(
        max_batch_size=cfg.max_batch_size,
        max_input_len=max_seq_len - 1,
        max_seq_len=max_seq_len,
        max_num_tokens=cfg.max_num_tokens,
        plugin_config=PluginConfig(tokens_per_block=cfg.tokens_per_block, gpt_attention_plugin=model.dtype),
    )


def requested_quantization(cfg: BuildConfig) -> dict:
    """The `quantization` section --quant asks for, as the TensorRT-LLM plans read it (the export
    adds its own details when the build runs)."""
    spec, _ = by_name(cfg.quant)
    q: dict = {"quant_algo": spec.quant_algo}
    if cfg.kv_cache_quant:
        q["kv_cache_quant_algo"] = kv_by_name(cfg.kv_cache_quant).kv_cache_quant_algo
    block = spec.block_for(cfg.group_size)
    if block > 1:
        q["group_size"] = block
    return q
