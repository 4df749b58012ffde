"""`--kv-offload BYTES` of `trtserve run`: the `kv_offload` engine option's budget (the prefix cache's
second tier), merged over the run config's; and `--kv-cache-dtype` of `run`, `generate` and `inspect`."""

from __future__ import annotations

import click
from pydantic import ValidationError

from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.options import KV_CACHE_DTYPES


def kv_offload_option(f):
    return click.option(
        "--kv-offload",
        metavar="BYTES",
        help="A second KV tier of BYTES (e.g. 8GiB) that evicted prefix blocks spill to, under the state dir "
        "(the `kv_offload` engine option) [off].",
    )(f)


def with_kv_offload(cfg, size: str | None):
    """The run config with --kv-offload's budget in its `kv_offload` engine option (made if unset)."""
    if size is None:
        return cfg
    base = cfg.engine.kv_offload
    try:
        tier = KVOffloadConfig.model_validate((base.model_dump() if base is not None else {}) | {"bytes": size})
    except ValidationError:
        raise UserError(f"--kv-offload {size!r} is not a size above 0; give bytes such as 8GiB or 512MiB") from None
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"kv_offload": tier})})


def kv_cache_dtype_option(f):
    return click.option(
        "--kv-cache-dtype",
        type=click.Choice(KV_CACHE_DTYPES),
        help="The KV cache's dtype: float16 or bfloat16 under a float32 engine hold twice the tokens and read half "
        "the bytes, keys and values rounded to 16 bits (the `kv_cache_dtype` engine option) [auto: the engine's].",
    )(f)
