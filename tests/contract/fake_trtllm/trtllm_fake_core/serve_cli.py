"""`trtllm-serve`'s command line, parsed but never served: each release's commands/serve.py builds it
from its facts row (facts.py: the --backend choices and aliases, every option under its names).
Imitates tensorrt_llm/commands/serve.py (click; 1.2 and later wrap the choices in ChoiceWithAlias so
`trt` still means `tensorrt`). PARSED records the last parse.
"""

from __future__ import annotations

import click

PARSED: list[dict] = []


class ChoiceWithAlias(click.Choice):
    """tensorrt_llm/commands/serve.py (1.2): a click.Choice with aliases mapped before checking."""

    def __init__(self, choices, aliases: dict[str, str], case_sensitive: bool = True):
        super().__init__(choices, case_sensitive)
        self.aliases = aliases

    def convert(self, value, param, ctx):
        return super().convert(self.aliases.get(value, value), param, ctx)


def make_serve_command(facts) -> click.Command:
    backend = ChoiceWithAlias(list(facts.serve_backends), facts.serve_aliases) if facts.serve_aliases else None

    @click.command("serve")
    @click.argument("model", type=str)
    @click.option("--backend", type=backend or click.Choice(list(facts.serve_backends)), default="pytorch")
    def serve(**kwargs):
        PARSED.append(kwargs)

    for dest, (names, kind, default) in facts.serve_options.items():
        if kind is bool:
            click.option(*names, dest, is_flag=True, default=default)(serve)
        else:
            click.option(*names, dest, type=kind, default=default)(serve)
    return serve
