"""`trtserve doctor`: what this host has for TensorRT-LLM and which workflows it can build and run."""

from __future__ import annotations

import json

import click


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(as_json: bool) -> None:
    """Report TensorRT-LLM / TensorRT / CUDA / driver / GPU and SM, and which workflows work here (and why not)."""
    from trtserve.backends.tensorrt_llm import host

    report = host.gather()
    verdicts = host.verdicts(report)
    if as_json:
        out = {"host": report.to_dict(), "workflows": [v.__dict__ for v in verdicts]}
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        click.echo(host.render(report, verdicts))
