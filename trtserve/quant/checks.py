"""Up-front checks that a --quant / --kv-cache-quant combination can work for a model, so a
build fails in one sentence before minutes of calibration (ModelOpt itself only fails at export)."""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.models.quant_formats import GROUP_SIZES, QUANT_FORMATS, by_name, grouped_names, quant_names
from trtserve.quant.calibration import read_text_file
from trtserve.quant.request import QuantRequest


def in_features(cfg: ModelConfig) -> dict[str, int]:
    """The input width of each kind of linear the formats quantize."""
    widths = {
        "hidden_size": cfg.hidden_size,  # q/k/v, gate/up
        "num_attention_heads * head_size": cfg.q_size,  # o_proj
        "intermediate_size": cfg.intermediate_size,  # down_proj
        "moe_intermediate_size": cfg.moe_intermediate_size,  # each expert's down_proj
        "moe_shared_expert_intermediate_size": cfg.moe_shared_expert_intermediate_size,  # the shared expert's
    }
    return {k: v for k, v in widths.items() if v}  # 0: the model has no such linear


def formats_that_fit(cfg: ModelConfig) -> list[str]:
    """--quant values (int4 ones with the --group-size they need, where the default does not fit)."""
    widths = in_features(cfg).values()
    fits = []
    for spec in QUANT_FORMATS.values():
        for recipe in spec.recipes:
            for block in spec.group_sizes or (spec.block,):
                if all(w % block == 0 for w in widths):
                    fits.append(recipe.name if block == spec.block else f"{recipe.name} --group-size {block}")
                    break
    return fits


def smoothquant_names() -> list[str]:
    return [r.name for s in QUANT_FORMATS.values() for r in s.recipes if r.smoothquant]


def check_quant(cfg: ModelConfig, build: QuantRequest) -> None:
    """Raise a UserError naming what cannot work and what can; reads --calib-data once to check it."""
    _check_format_flags(build)
    quant = build.quant
    if quant is None:
        if build.calib_data is not None:
            raise UserError("--calib-data is only used with --quant; add --quant or drop --calib-data")
        if build.kv_cache_quant is not None:
            raise UserError(
                f"--kv-cache-quant {build.kv_cache_quant} needs a weight format too; "
                f"add --quant (one of {', '.join(quant_names())})"
            )
        return
    spec = by_name(quant)[0]
    if spec.source is not None and build.backend != "torch":
        raise UserError(
            f"--quant {quant} keeps a {spec.source.upper()} file's own quantization on the torch backend only; "
            f"drop --backend {build.backend}, or pick a ModelOpt format such as --quant w4a16"
        )
    if spec.source is not None and build.kv_cache_quant is not None:
        raise UserError(
            f"--kv-cache-quant needs ModelOpt's calibration, which --quant {quant} does not run; drop one of them"
        )
    block = spec.block_for(build.group_size)
    bad = {k: v for k, v in in_features(cfg).items() if v % block}
    if bad:
        what = ", ".join(f"{k} = {v}" for k, v in bad.items())
        fits = ", ".join(formats_that_fit(cfg)) or "none"
        raise UserError(
            f"--quant {quant} needs every linear's in-features divisible by {block}, but {what}; "
            f"formats that work for this model: {fits}"
        )
    if build.tp_size != 1:
        raise UserError(f"--quant {quant} builds tp-size 1 checkpoints only; drop --tp-size {build.tp_size}")
    if build.calib_data is not None:
        text = read_text_file(build.calib_data)
        if not text.strip():
            raise UserError(
                f"--calib-data {build.calib_data} holds no text; give a .txt file or .jsonl with 'text' fields"
            )


def _check_format_flags(build: QuantRequest) -> None:
    """--smoothquant-alpha and --group-size only with the formats that take them."""
    quant = build.quant
    what = f"--quant {quant}" if quant else "an unquantized build"
    smooth = smoothquant_names()
    if build.smoothquant_alpha is not None and quant not in smooth:
        raise UserError(
            f"--smoothquant-alpha applies to --quant {' / '.join(smooth)} only, not to {what}; "
            f"drop it or use --quant {' / '.join(smooth)}"
        )
    grouped = grouped_names()
    if build.group_size != GROUP_SIZES[0] and quant not in grouped:
        raise UserError(
            f"--group-size {build.group_size} applies to int4 groups ({', '.join(grouped)}), not to {what}; "
            "drop --group-size or pick one of those formats"
        )
