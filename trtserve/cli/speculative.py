"""`--speculative ngram|draft:DIR` and `--speculative-tokens K`, shared by `trtserve run` and
`trtserve generate` (they set the `speculative` engine option)."""

from __future__ import annotations

from typing import Any

import click
from pydantic import ValidationError

from trtserve.engine.errors import UserError
from trtserve.engine.speculative import SpeculativeConfig


def speculative_options(f):
    f = click.option(
        "--speculative-tokens", type=click.IntRange(1, 16), help="With --speculative: tokens proposed per step [3]."
    )(f)
    return click.option(
        "--speculative",
        metavar="ngram|draft:DIR",
        help="Speculative decoding: n-gram prompt lookup, or the draft model's engine dir DIR (torch backend).",
    )(f)


def merged(base: SpeculativeConfig | None, method: str | None, tokens: int | None) -> SpeculativeConfig | None:
    """`base` (the run config's, if any) with the flags' method and token count put over it."""
    if method is None:
        if tokens is not None:
            raise UserError("--speculative-tokens needs --speculative ngram|draft:DIR")
        return base
    update: dict[str, Any]
    if method == "ngram":
        update = {"method": "ngram", "draft_engine_dir": None}
    elif method.startswith("draft:") and method.removeprefix("draft:"):
        update = {"method": "draft_model", "draft_engine_dir": method.removeprefix("draft:")}
    else:
        raise UserError(f"--speculative {method!r} is not a method; give ngram or draft:DRAFT_ENGINE_DIR")
    if tokens is not None:
        update["num_speculative_tokens"] = tokens
    fields = base.model_dump() if base is not None else {}
    try:
        return SpeculativeConfig.model_validate(fields | update)
    except ValidationError as err:
        raise UserError(f"--speculative: {err.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def with_speculative(cfg, method: str | None, tokens: int | None):
    """The run config with the flags merged into its `speculative` engine option."""
    spec = merged(cfg.engine.speculative, method, tokens)
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"speculative": spec})})
