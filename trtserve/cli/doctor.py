"""`trtserve doctor`: what this host has for TensorRT-LLM, which workflows it can build and run, and what
the installed (or planned) TensorRT-LLM release serves: each model and capability row of the adapter's tables."""

from __future__ import annotations

import json

import click


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--trtllm-version",
    default=None,
    help="Report the model and capability rows for this release (1.0, 1.1, 1.2, main) instead of the installed one.",
)
def command(as_json: bool, trtllm_version: str | None) -> None:
    """Report TensorRT-LLM / TensorRT / CUDA / driver / GPU and SM, which workflows work here (and why not),
    and which models and capabilities the TensorRT-LLM release serves through trtserve."""
    from trtserve.backends.tensorrt_llm import capabilities, host, support_doc

    report = host.gather()
    verdicts = host.verdicts(report)
    caps = capabilities.for_planning(trtllm_version) if trtllm_version or report.caps is None else report.caps
    if as_json:
        out = {"host": report.to_dict(), "workflows": [v.__dict__ for v in verdicts]}
        out["capabilities"] = support_doc.doctor_report(caps)
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        click.echo(host.render(report, verdicts))
        click.echo("\n".join(support_doc.doctor_lines(caps)))
