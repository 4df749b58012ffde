"""`trtserve inspect ENGINE_DIR`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from trtserve.cli.kv_offload import kv_cache_dtype_option


@click.command("inspect")
@click.argument("engine_dir", type=click.Path(path_type=Path))
@click.option("--memory", help="Memory budget for weights and KV cache (e.g. 8GiB): report how many tokens fit.")
@click.option("--kv-cache-memory", help="KV-cache budget, as `trtserve run --kv-cache-memory`: report what it holds.")
@kv_cache_dtype_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def command(
    engine_dir: Path, memory: str | None, kv_cache_memory: str | None, kv_cache_dtype: str | None, as_json: bool
) -> None:
    """Summarize an engine dir: manifest, model shape, weight and KV bytes, capacity."""
    from trtserve.build.inspect import parse_memory, summarize

    info = summarize(
        engine_dir,
        parse_memory(memory) if memory else None,
        parse_memory(kv_cache_memory, "--kv-cache-memory") if kv_cache_memory else None,
        kv_cache_dtype or "auto",
    )
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    table = Table(title=f"engine {engine_dir}", show_header=False)
    for key, value in info.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, int) and ("bytes" in key or key == "memory_budget"):  # a byte count, also in MiB
            value = f"{value:,} ({value / 2**20:.1f} MiB)"
        table.add_row(key, str(value))
    Console().print(table)
