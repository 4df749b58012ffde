"""Up-front checks that a --quant / --kv-cache-quant combination can work for a model, so a
build fails in one sentence before minutes of calibration (ModelOpt itself only fails at export)."""

from __future__ import annotations

from trtserve.build.config import BuildConfig
from trtserve.errors import UserError
from trtserve.models.config import ModelConfig
from trtserve.quant.calibration import read_text_file
from trtserve.quant.formats import FORMATS, GROUPED


def in_features(cfg: ModelConfig) -> dict[str, int]:
    """The input width of each kind of linear the formats quantize."""
    return {
        "hidden_size": cfg.hidden_size,  # q/k/v, gate/up
        "num_attention_heads * head_size": cfg.q_size,  # o_proj
        "intermediate_size": cfg.intermediate_size,  # down_proj
    }


def formats_that_fit(cfg: ModelConfig) -> list[str]:
    """Format names (int4 ones with the --group-size they need, where 128 does not fit)."""
    widths = in_features(cfg).values()
    fits = []
    for name, fmt in FORMATS.items():
        for group in (128, 64) if name in GROUPED else (fmt.block,):
            if all(w % fmt.with_group_size(group).block == 0 for w in widths):
                fits.append(name if group == fmt.block else f"{name} --group-size {group}")
                break
    return fits


def check_quant(cfg: ModelConfig, build: BuildConfig) -> None:
    """Raise a UserError naming what cannot work and what can; reads --calib-data once to check it."""
    quant, kv_cache_quant, tp_size, calib_data = build.quant, build.kv_cache_quant, build.tp_size, build.calib_data
    group_size = build.group_size
    if build.smoothquant_alpha is not None and quant != "w8a8_sq":
        raise UserError(
            f"--smoothquant-alpha applies to --quant w8a8_sq only, not to "
            f"{f'--quant {quant}' if quant else 'an unquantized build'}; drop it or use --quant w8a8_sq"
        )
    if group_size != 128 and quant not in GROUPED:
        raise UserError(
            f"--group-size {group_size} applies to int4 groups ({', '.join(GROUPED)}), not to "
            f"{f'--quant {quant}' if quant else 'an unquantized build'}; "
            "drop --group-size or pick one of those formats"
        )
    if quant is None:
        if calib_data is not None:
            raise UserError("--calib-data is only used with --quant; add --quant or drop --calib-data")
        if kv_cache_quant is not None:
            raise UserError(
                f"--kv-cache-quant {kv_cache_quant} needs a weight format too; add --quant (one of {', '.join(FORMATS)})"
            )
        return
    fmt = FORMATS[quant].with_group_size(group_size)
    bad = {k: v for k, v in in_features(cfg).items() if v % fmt.block}
    if bad:
        what = ", ".join(f"{k} = {v}" for k, v in bad.items())
        fits = ", ".join(formats_that_fit(cfg)) or "none"
        raise UserError(
            f"--quant {quant} needs every linear's in-features divisible by {fmt.block}, but {what}; "
            f"formats that work for this model: {fits}"
        )
    if tp_size != 1:
        raise UserError(f"--quant {quant} builds tp-size 1 checkpoints only; drop --tp-size {tp_size}")
    if calib_data is not None:
        text = read_text_file(calib_data)
        if not text.strip():
            raise UserError(f"--calib-data {calib_data} holds no text; give a .txt file or .jsonl with 'text' fields")
