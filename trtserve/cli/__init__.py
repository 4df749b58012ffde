"""The `trtserve` command line: one file per command, argument parsing only."""

from __future__ import annotations

import importlib
import logging
import signal
import sys

import click

from trtserve import __version__
from trtserve.engine.errors import UserError

# each trtserve/cli/<name>.py holds the command <name>, as `command`
_COMMANDS = ("batch", "bench", "build", "check", "doctor", "dynamo", "eval", "generate", "inspect", "receipt")
_COMMANDS += ("replay", "repo", "run")


class _Group(click.Group):
    """Prints a UserError as one line on stderr with exit code 2, never a stack trace. A command's
    module is imported only when it runs (or --help lists it): `trtserve run` starts without what
    `build`, `eval` or `bench` import."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str):
        return importlib.import_module(f"trtserve.cli.{name}").command if name in _COMMANDS else None

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
