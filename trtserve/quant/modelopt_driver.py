"""Run NVIDIA ModelOpt on a source checkpoint: calibrate + quantize (`mtq.quantize`), then write
its HF unified export (`export_hf_checkpoint`). ModelOpt and transformers are imported here only."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtserve.models.quant_formats import by_name, kv_by_name
from trtserve.quant.calibration import calibration_batches
from trtserve.quant.request import QuantRequest, TensorSource

_IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


def load_hf_model(reader: TensorSource, architecture: str, dtype: torch.dtype) -> torch.nn.Module:
    """The source as a transformers model (HF dir or GGUF alike: tensors come from the reader)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(reader.hf_config)
    config.architectures = [architecture]  # ModelOpt's export needs it (unset for configs built in code)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    state = {n: reader.load(n).to(dtype) for n in reader.names() if not n.endswith(_IGNORABLE_SUFFIXES)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [n for n in missing if not (n == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:  # check_source has matched names and shapes already
        raise AssertionError(f"source does not fit {architecture}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.eval()


def quantize(model: torch.nn.Module, tokenizer, cfg: QuantRequest, console: Console, quiet: bool) -> torch.nn.Module:
    """Calibrate and fake-quantize `model` in place with ModelOpt as `cfg` (its quant, KV-cache,
    calibration, group-size and SmoothQuant settings) says; returns it."""
    with _quiet_modelopt():  # it warns on import about untested transformers versions
        import modelopt.torch.quantization as mtq

    calibrated = by_name(cfg.quant)[1].calibrated or cfg.kv_cache_quant is not None
    loop: Callable | None = None
    if calibrated:
        batches = calibration_batches(tokenizer, cfg.calib_data, cfg.calib_size, cfg.calib_seq_len)
        loop = _forward_loop(batches, console, quiet)
    recipe = modelopt_config(cfg.quant, cfg.kv_cache_quant, cfg.group_size, cfg.smoothquant_alpha)
    with _quiet_modelopt(), torch.inference_mode(False), torch.no_grad():
        mtq.quantize(model, recipe, loop)
    return model


def modelopt_config(
    quant: str, kv_cache_quant: str | None, group_size: int = 128, smoothquant_alpha: float | None = None
) -> dict:
    """The `mtq.quantize` config for a --quant value (its recipe's ModelOpt config), with the int4
    group size and the KV-cache quantizers applied. smoothquant_alpha None: 0.5, TensorRT-LLM's
    smoothquant_val (ModelOpt's own default is 1.0)."""
    import modelopt.torch.quantization as mtq

    spec, recipe = by_name(quant)
    cfg = copy.deepcopy(getattr(mtq, recipe.modelopt_cfg))
    if spec.group_sizes:
        for entry in cfg["quant_cfg"]:
            if entry["quantizer_name"] == "*weight_quantizer":
                entry["cfg"]["block_sizes"][-1] = group_size
    if recipe.smoothquant:
        alpha = 0.5 if smoothquant_alpha is None else smoothquant_alpha
        cfg["algorithm"] = {"method": "smoothquant", "alpha": alpha}
    if kv_cache_quant:
        kv = {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": dict(kv_by_name(kv_cache_quant).modelopt_quantizer)}
        cfg["quant_cfg"] = [*cfg["quant_cfg"], kv]
    return cfg


def export(model: torch.nn.Module, dtype: torch.dtype, dest: Path) -> dict[str, torch.Tensor]:
    """ModelOpt's HF unified export of a copy (the export leaves the model it exports unusable).

    ModelOpt 0.47's HF export rejects INT8 KV caches, so their scales (amax / 127, named as the
    export names FP8 ones: `self_attn.k_proj.k_scale`, `v_proj.v_scale`) are returned instead."""
    from modelopt.torch.export import export_hf_checkpoint

    model = copy.deepcopy(model)
    extra: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        k, v = getattr(attn, "k_bmm_quantizer", None), getattr(attn, "v_bmm_quantizer", None)
        if k is not None and k.is_enabled and k.num_bits == 8:
            p = f"model.layers.{i}.self_attn."
            extra[p + "k_proj.k_scale"] = (k.amax.float() / 127).reshape(())
            extra[p + "v_proj.v_scale"] = (v.amax.float() / 127).reshape(())
            for q in (k, v):
                q.disable()
                del q._amax  # the export asserts on any KV amax that is not FP8
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" of a temporary file
    with _quiet_modelopt():
        export_hf_checkpoint(model, dtype=dtype, export_dir=str(dest))
    return extra


def _forward_loop(batches: list[torch.Tensor], console: Console, quiet: bool) -> Callable:
    passes = [0]

    def loop(model: torch.nn.Module) -> None:
        passes[0] += 1  # AWQ runs the loop more than once
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, disable=quiet) as bar:
            for ids in bar.track(batches, description=f"calibration pass {passes[0]}"):
                model(ids.to(next(model.parameters()).device))

    return loop


@contextlib.contextmanager
def _quiet_modelopt():
    """ModelOpt prints progress to stdout and warns about things that do not apply here (e.g.
    "Enable lm_head quantization" although lm_head stays unquantized); keep the build log clean."""
    from transformers.utils import logging as hf_logging

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        level, hf_level = logging.getLogger("modelopt").level, hf_logging.get_verbosity()
        logging.getLogger("modelopt").setLevel(logging.ERROR)
        hf_logging.set_verbosity_error()  # "`torch_dtype` is deprecated" from ModelOpt's export
        try:
            yield
        finally:
            logging.getLogger("modelopt").setLevel(level)
            hf_logging.set_verbosity(hf_level)
