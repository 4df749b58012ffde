"""`trtserve batch submit | status | results`: the Batch API of a running server, from the shell."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from trtserve.engine.errors import UserError

FINAL = ("completed", "failed", "expired", "cancelled")
_url = click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The server.")
_key = click.option("--api-key", help="Bearer key (or set TRTSERVE_API_KEY).")


class Client:
    """The few calls the CLI makes; every failure is one sentence (UserError)."""

    def __init__(self, url: str, api_key: str | None):
        import requests

        self.url, self.http = url.rstrip("/"), requests.Session()
        key = api_key or os.environ.get("TRTSERVE_API_KEY")
        if key:
            self.http.headers["Authorization"] = f"Bearer {key}"

    def call(self, method: str, path: str, **kw):
        import requests

        try:
            r = self.http.request(method, self.url + path, timeout=60, **kw)
        except requests.ConnectionError:
            raise UserError(f"cannot reach {self.url}; is `trtserve run` serving there? (--url)") from None
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
                message = err["message"] if isinstance(err, dict) else err
            except (ValueError, KeyError, TypeError):
                message = r.text[:200]
            raise UserError(f"{method} {path} answered {r.status_code}: {message}")
        return r


@click.group("batch")
def command() -> None:
    """Submit a JSONL file to a running server's Batch API, follow it, fetch its results."""


@command.command("submit")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--endpoint", type=click.Choice(["/v1/completions", "/v1/chat/completions"]), default="/v1/chat/completions"
)
@click.option("--window", "completion_window", default="24h", show_default=True, help="completion_window.")
@click.option("--wait", is_flag=True, help="Follow it with a progress bar until it ends.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="With --wait: save results here.")
@_url
@_key
def submit(file: Path, endpoint: str, completion_window: str, wait: bool, output: Path | None, url, api_key) -> None:
    """Upload FILE (one {custom_id, method, url, body} per line) and start a batch; prints its id."""
    c = Client(url, api_key)
    with open(file, "rb") as f:
        up = c.call("POST", "/v1/files", files={"file": (file.name, f)}, data={"purpose": "batch"}).json()
    body = {"input_file_id": up["id"], "endpoint": endpoint, "completion_window": completion_window}
    batch = c.call("POST", "/v1/batches", json=body).json()
    click.echo(batch["id"])
    if wait:
        _finish(c, batch["id"], output)


@command.command("status")
@click.argument("batch_id")
@click.option("--wait", is_flag=True, help="Follow it with a progress bar until it ends.")
@_url
@_key
def status(batch_id: str, wait: bool, url, api_key) -> None:
    """Print a batch's status and counts (or follow it with --wait)."""
    c = Client(url, api_key)
    if wait:
        return _finish(c, batch_id, None)
    _summary(c.call("GET", f"/v1/batches/{batch_id}").json())


@command.command("results")
@click.argument("batch_id")
@click.option("--errors", is_flag=True, help="The error file instead of the output file.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
@_url
@_key
def results(batch_id: str, errors: bool, output: Path | None, url, api_key) -> None:
    """Print (or save) a finished batch's output lines, or with --errors its error lines."""
    c = Client(url, api_key)
    batch = c.call("GET", f"/v1/batches/{batch_id}").json()
    _save(c, batch, errors, output)


def _save(c: Client, batch: dict, errors: bool, output: Path | None) -> None:
    file_id = batch["error_file_id" if errors else "output_file_id"]
    if file_id is None:
        if batch["status"] not in FINAL:
            raise UserError(
                f"batch {batch['id']} is still {batch['status']}; wait for it (trtserve batch status --wait)"
            )
        click.echo(f"batch {batch['id']} ({batch['status']}) has no {'error' if errors else 'output'} lines", err=True)
        return
    data = c.call("GET", f"/v1/files/{file_id}/content").content
    if output is None:
        sys.stdout.buffer.write(data)
    else:
        tmp = output.with_name(output.name + ".partial")
        tmp.write_bytes(data)
        tmp.replace(output)  # never a half-written results file
        click.echo(f"wrote {output}", err=True)


def _finish(c: Client, batch_id: str, output: Path | None) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(batch_id, total=None)
        while True:
            b = c.call("GET", f"/v1/batches/{batch_id}").json()
            n = b["request_counts"]
            bar.update(
                task,
                total=n["total"] or None,
                completed=n["completed"] + n["failed"],
                description=f"{batch_id} {b['status']}",
            )
            if b["status"] in FINAL:
                break
            time.sleep(0.5)
    _summary(b)
    if output is not None:
        _save(c, b, False, output)
    if b["status"] != "completed":
        sys.exit(1)


def _summary(b: dict) -> None:
    n = b["request_counts"]
    click.echo(f"{b['id']}: {b['status']} ({n['completed']} completed, {n['failed']} failed of {n['total']})")
    for e in (b.get("errors") or {}).get("data", []):
        click.echo(f"  line {e.get('line')}: {e['message']}")
    if b.get("output_file_id"):
        click.echo(f"  output: {b['output_file_id']}")
    if b.get("error_file_id"):
        click.echo(f"  errors: {b['error_file_id']}")
