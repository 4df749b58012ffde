"""`trtserve receipt show ID --server URL`: fetch a stored receipt (the server's admin key)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from trtserve.engine.errors import UserError


def admin_headers(admin_key: str | None) -> dict:
    key = admin_key or os.environ.get("TRTSERVE_ADMIN_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def server_error(resp, what: str) -> UserError:
    """A server's refusal as one sentence (its own message when it sent one)."""
    try:
        message = resp.json()["error"]["message"]
    except Exception:
        message = resp.text.strip()[:300] or resp.reason_phrase
    return UserError(f"{what}: the server answered {resp.status_code} ({message})")


def fetch_receipt(server: str, receipt_id: str, admin_key: str | None) -> dict:
    import httpx

    url = f"{server.rstrip('/')}/v1/receipts/{receipt_id}"
    try:
        resp = httpx.get(url, headers=admin_headers(admin_key), timeout=30)
    except httpx.HTTPError as err:
        raise UserError(f"cannot reach {server} ({err}); check --server") from None
    if resp.status_code != 200:
        raise server_error(resp, f"fetching receipt {receipt_id}")
    return resp.json()


@click.group("receipt")
def command() -> None:
    """Receipts the server stored (run it with --receipts on|hashes)."""


@command.command("show")
@click.argument("receipt_id")
@click.option("--server", required=True, help="The server's URL, e.g. http://127.0.0.1:8000.")
@click.option("--admin-key", help="The server's admin key [TRTSERVE_ADMIN_KEY].")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Also write it to this file (for replay).")
def show(receipt_id: str, server: str, admin_key: str | None, output: Path | None) -> None:
    """Print receipt RECEIPT_ID as JSON."""
    text = json.dumps(fetch_receipt(server, receipt_id, admin_key), indent=2)
    if output is not None:
        output.write_text(text + "\n")
    click.echo(text)
