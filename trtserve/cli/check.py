"""`trtserve check CONFIG.yaml ...`: engine-build checks for CI (trtserve/check/)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

LEVELS = ("plan", "smoke", "full")  # trtserve/check/runner.py's; listed here so --help imports no torch


@click.command("check")
@click.argument("configs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--target",
    help="Where the engine runs: a preset (h100-80gb, h200-141gb, l4-24gb, a10g-24gb, cpu-32gb, ...) or a "
    "size per device (24GiB); wins over each config's `target:`.",
)
@click.option(
    "--level",
    type=click.Choice(LEVELS),
    default="plan",
    show_default=True,
    help="plan: schema, support, memory, plan, lock (no build); smoke: + a tiny random twin built and "
    "compared with HF transformers; full: + the real build scored with `trtserve eval`.",
)
@click.option(
    "--lock",
    type=click.Path(dir_okay=False, path_type=Path),
    help="engine.lock (from `trtserve build --lock`) to compare with; one config only (else set checks.lock).",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), help="Write JSON here.")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the engines --level full builds here [a temporary dir, removed].",
)
@click.option("--details", is_flag=True, help="Print every check's detail (plans, commands), not only failures'.")
def command(
    configs: tuple[Path, ...],
    target: str | None,
    level: str,
    lock: Path | None,
    junit: Path | None,
    json_file: Path | None,
    work_dir: Path | None,
    details: bool,
) -> None:
    """Check build configs: exit 0 when every check passes, 1 when one fails, 2 on a usage error.

    Each CONFIG is the YAML `trtserve build --config` takes, plus an optional `target:` and `checks:`
    block (docs/ci-checks.md).
    """
    from rich.console import Console

    from trtserve.check import report
    from trtserve.check.runner import Options, run_checks

    for out in (junit, json_file):
        if out is not None and not out.resolve().parent.is_dir():
            raise click.UsageError(f"cannot write {out}: its directory does not exist")
    reports = run_checks(list(configs), Options(level, target, lock, work_dir))
    report.print_table(reports, Console(), details)
    if junit is not None:
        report.write_junit(reports, level, junit)
    if json_file is not None:
        report.write_json(reports, level, json_file)
    sys.exit(1 if any(r.failed for r in reports) else 0)
