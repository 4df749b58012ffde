"""The `trtserve` command line: one file per command, argument parsing only."""

from __future__ import annotations

import logging
import signal
import sys

import click

from trtserve import __version__
from trtserve.engine.errors import UserError


class _Group(click.Group):
    """Prints a UserError as one line on stderr with exit code 2, never a stack trace."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as err:
            click.echo("error: " + " ".join(str(err).split()), err=True)  # always one line
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted; nothing was left half-written", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trtserve")
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail.")
def main(verbose: bool) -> None:
    """Compile LLM checkpoints into engines and serve them (TensorRT-LLM or the embedded torch engine)."""
    # SIGTERM unwinds like Ctrl-C, so a build removes its staging dir before exiting.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    from trtserve.cli import (
        batch,
        bench,
        build,
        check,
        doctor,
        dynamo,
        eval,
        generate,
        inspect,
        receipt,
        replay,
        repo,
        run,
    )

    for module in (bench, build, check, doctor, eval, generate, inspect, run, repo, receipt, replay, batch, dynamo):
        main.add_command(module.command)


_register()
