"""`trtserve eval ENGINE_DIR [--reference REF_DIR]`: perplexity, top-1 agreement and KL."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table


@click.command("eval")
@click.argument("engine_dir", type=click.Path(path_type=Path))
@click.option(
    "--reference",
    type=click.Path(path_type=Path),
    help="An unquantized engine of the same model: also report top-1 agreement, KL(ref || engine), ppl delta.",
)
@click.option(
    "--data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Text to score: a TXT file, or JSONL (.jsonl) with a "text" field per line. Default: a built-in text.',
)
@click.option("--max-tokens", type=click.IntRange(2), help="Score at most the first N tokens of the text.")
@click.option("--seq-len", type=click.IntRange(2), help="Window length in tokens [default: min(512, max_seq_len)].")
@click.option("--stride", type=click.IntRange(1), help="Tokens between window starts [default: seq-len / 2].")
@click.option("--threads", type=click.IntRange(1), help="Torch CPU threads [default: torch's choice].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def command(
    engine_dir: Path,
    reference: Path | None,
    data: Path | None,
    max_tokens: int | None,
    seq_len: int | None,
    stride: int | None,
    threads: int | None,
    as_json: bool,
) -> None:
    """Measure ENGINE_DIR's perplexity on a text, and how closely it follows a --reference engine.

    Windows of --seq-len tokens, --stride apart, each score only tokens the previous one did not.
    """
    import torch
    from rich.progress import Progress

    from trtserve.runtime.evaluate import evaluate

    if threads is not None:
        torch.set_num_threads(threads)
    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=as_json or not err.is_terminal) as bar:
        task = bar.add_task("scoring windows", total=None)
        result = evaluate(
            engine_dir,
            reference,
            data,
            max_tokens,
            seq_len,
            stride,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    info = result.to_dict()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    table = Table(title=f"eval {engine_dir}", show_header=False)
    for key, value in info.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = f"{value:.4f}%" if key.endswith("_pct") else f"{value:.6g}"
        table.add_row(key, str(value))
    Console().print(table)
