"""Up-front checks that a --quant / --kv-cache-quant combination can work for a model, so a
build fails in one sentence before minutes of calibration (ModelOpt itself only fails at export)."""

from __future__ import annotations

from pathlib import Path

from trtserve.errors import UserError
from trtserve.models.config import ModelConfig
from trtserve.quant.calibration import read_text_file
from trtserve.quant.formats import FORMATS


def in_features(cfg: ModelConfig) -> dict[str, int]:
    """The input width of each kind of linear the formats quantize."""
    return {
        "hidden_size": cfg.hidden_size,  # q/k/v, gate/up
        "num_attention_heads * head_size": cfg.q_size,  # o_proj
        "intermediate_size": cfg.intermediate_size,  # down_proj
    }


def formats_that_fit(cfg: ModelConfig) -> list[str]:
    widths = in_features(cfg).values()
    return [n for n, f in FORMATS.items() if all(w % f.block == 0 for w in widths)]


def check_quant(
    cfg: ModelConfig, quant: str | None, kv_cache_quant: str | None, tp_size: int, calib_data: Path | None = None
) -> None:
    """Raise a UserError naming what cannot work and what can; reads --calib-data once to check it."""
    if quant is None:
        if calib_data is not None:
            raise UserError("--calib-data is only used with --quant; add --quant or drop --calib-data")
        if kv_cache_quant is not None:
            raise UserError(
                f"--kv-cache-quant {kv_cache_quant} needs a weight format too; add --quant (one of {', '.join(FORMATS)})"
            )
        return
    fmt = FORMATS[quant]
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
