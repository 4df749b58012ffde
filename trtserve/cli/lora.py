"""`--lora NAME=DIR` (repeatable), shared by `trtserve build` (packs adapters) and `trtserve run`
(serves more at start, through the `lora` engine option)."""

from __future__ import annotations

import click


def lora_option(help_text: str):
    """The click option; its value is {name: dir}, or None when none is given (a config file's stand)."""
    return click.option(
        "--lora",
        multiple=True,
        metavar="NAME=DIR",
        callback=lambda _ctx, _param, v: adapters(v),
        help=help_text,
    )


def adapters(values: tuple[str, ...]) -> dict[str, str] | None:
    """--lora NAME=DIR ... as {name: dir}; None when none is given."""
    out: dict[str, str] = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(
                f"{v!r} is not NAME=DIR; give the adapter's name and its PEFT dir, e.g. sql=./sql-lora"
            )
        if name in out:
            raise click.BadParameter(f"adapter name {name} is given twice; give each adapter its own name")
        out[name] = path
    return out or None
