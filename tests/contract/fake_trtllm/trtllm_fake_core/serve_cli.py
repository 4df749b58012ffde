"""`trtllm-serve`'s command line, parsed but never served: each release's commands/serve.py builds it
with that release's --backend choices. Imitates tensorrt_llm/commands/serve.py (click; 1.2 and later
wrap the choices in ChoiceWithAlias so `trt` still means `tensorrt`). PARSED records the last parse.
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


def make_serve_command(backend_type: click.ParamType) -> click.Command:
    @click.command("serve")
    @click.argument("model", type=str)
    @click.option("--tokenizer", type=str, default=None)
    @click.option("--host", type=str, default="localhost")
    @click.option("--port", type=int, default=8000)
    @click.option("--backend", type=backend_type, default="pytorch")
    @click.option("--tp_size", type=int, default=1)
    @click.option("--extra_llm_api_options", type=str, default=None)
    def serve(**kwargs):
        PARSED.append(kwargs)

    return serve
