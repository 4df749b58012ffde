"""The tensors step of a build: the TensorRT-LLM checkpoint (checkpoint/config.json and
rank{r}.safetensors) and, where the backend loads them, the torch engine's model.safetensors.

Two producers with one interface: the source's tensors converted as they are (`SourceTensors`; its
linears rewritten where --quant keeps a GGUF's quantization or rounds weights without ModelOpt), or
quantized through ModelOpt (`QuantizedTensors`, which also produces the checkpoint's
`quantization` section). `tensors_for(plan)` picks one; the backends' strategies only call it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtserve.backends.tensorrt_llm.build_plan import trtllm_checkpoint_config
from trtserve.build.convert import (
    assert_each_source_used_once,
    check_source,
    checkpoint_specs,
    engine_specs,
)
from trtserve.build.gguf_linears import Kept, kept
from trtserve.build.job import Written
from trtserve.build.planner import BuildPlan
from trtserve.build.safetensors_io import TensorSpec, write_safetensors
from trtserve.build.weight_only import rounded
from trtserve.engine.layout import CHECKPOINT_DIR, ENGINE_WEIGHTS, TOKENIZER_DIR, rank_file
from trtserve.engine.model_config import ModelConfig
from trtserve.models.quant_formats import by_name

_EXPORT_DIR = ".modelopt-export"  # ModelOpt's scratch export inside the staged dir, removed again


class TensorStep(Protocol):
    def write(self, tmp: Path, console: Console, *, engine_weights: bool) -> Written:
        """Write checkpoint/ (and model.safetensors with `engine_weights`) into the staged dir `tmp`;
        the tokenizer is already in tmp/tokenizer."""


def tensors_for(plan: BuildPlan) -> TensorStep:
    """The step for the plan, its checks done (UserError before anything is written)."""
    if (weight_only := rounded(plan)) is not None:  # experts: rounded here (build/weight_only.py)
        return SourceTensors(plan, weight_only)
    modelopt = plan.config.quant and by_name(plan.config.quant)[0].source is None  # else the source's own (gguf)
    return QuantizedTensors(plan) if modelopt else SourceTensors(plan, kept(plan))


class SourceTensors:
    """The source's tensors, converted (fused, split per rank, cast) lazily while being written."""

    def __init__(self, plan: BuildPlan, kept: Kept):
        self.plan = plan
        self.kept = kept  # the rewrite of its linears, and the model as built
        tp = plan.config.tp_size
        expected = check_source(plan.reader, plan.model)
        self.ranks = [checkpoint_specs(plan.model, plan.reader, r, tp) for r in range(tp)]
        assert_each_source_used_once(self.ranks[0], expected, plan.model)
        self.ranks = [self.kept.specs(r) for r in self.ranks]

    def write(self, tmp: Path, console: Console, *, engine_weights: bool) -> Written:
        model = self.kept.model
        weights = self.kept.specs(engine_specs(model, self.plan.reader)) if engine_weights else []
        write_checkpoint_config(tmp, model)
        with _progress(console, sum(len(r) for r in self.ranks) + len(weights)) as step:
            ckpt_bytes = sum(write_safetensors(tmp / rank_file(r), s, step) for r, s in enumerate(self.ranks))
            weight_bytes = write_safetensors(tmp / ENGINE_WEIGHTS, weights, step) if engine_weights else 0
        return Written(model, ckpt_bytes, weight_bytes)


class QuantizedTensors:
    """ModelOpt's calibrated export of the source, converted (quant/build.py); tp 1."""

    def __init__(self, plan: BuildPlan):
        self.plan = plan
        check_source(plan.reader, plan.model)  # names and shapes, before minutes of calibration

    def write(self, tmp: Path, console: Console, *, engine_weights: bool) -> Written:
        from trtserve.quant.build import quantize

        p = self.plan
        q = quantize(
            p.reader, p.model, p.config, tmp / _EXPORT_DIR, tmp / TOKENIZER_DIR, console, engine_weights=engine_weights
        )
        model = p.model.model_copy(update={"quantization": q.quantization})
        write_checkpoint_config(tmp, model)
        ckpt_bytes = write_safetensors(tmp / rank_file(0), as_specs(q.checkpoint))
        weight_bytes = write_safetensors(tmp / ENGINE_WEIGHTS, as_specs(q.engine_weights)) if engine_weights else 0
        return Written(model, ckpt_bytes, weight_bytes)


def write_checkpoint_config(tmp: Path, model: ModelConfig) -> None:
    """checkpoint/config.json as `trtllm-build` accepts it as is, whichever backend the engine dir is for."""
    (tmp / CHECKPOINT_DIR).mkdir(exist_ok=True)
    config = trtllm_checkpoint_config(model.to_trtllm())
    (tmp / CHECKPOINT_DIR / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def as_specs(tensors: dict) -> list[TensorSpec]:
    """Tensors already in memory (the quantized step's) as write_safetensors' specs."""
    return [TensorSpec(n, tuple(t.shape), t.dtype, lambda t=t: t, ()) for n, t in tensors.items()]


@contextlib.contextmanager
def _progress(console: Console, total: int) -> Iterator[Callable[[], None]]:
    """A "converting tensors" bar over `total` tensors; yields the per-tensor step callback."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=console.quiet or not total) as bar:
        task = bar.add_task("converting tensors", total=total)
        yield lambda: bar.advance(task)
