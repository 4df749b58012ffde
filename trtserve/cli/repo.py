"""`trtserve repo status|load|unload|promote|canary|rollback|shadow`: the model repository of a
running server, over its admin routes (serve/repository/admin.py)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import click

from trtserve.engine.errors import UserError


def _call(ctx: click.Context, method: str, path: str, body: dict | None = None) -> dict:
    url, key = ctx.obj["url"].rstrip("/"), ctx.obj["admin_key"]
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=ctx.obj["timeout"]) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        try:
            problem = json.loads(err.read()).get("error")
        except (json.JSONDecodeError, AttributeError):
            problem = None
        message = problem.get("message") if isinstance(problem, dict) else problem
        raise UserError(f"the server refused it ({err.code}): {message or err.reason}") from None
    except urllib.error.URLError as err:
        raise UserError(f"cannot reach {url} ({err.reason}); is `trtserve run` up there? (--url)") from None


def _show(status: dict) -> None:
    """One line per version, then labels, weights, guard and shadow of each model."""
    for name, m in status["models"].items():
        click.echo(f"{name}: default {m['default']}, labels {m['labels'] or '-'}, weights {m['weights'] or '-'}")
        for v, mv in m["versions"].items():
            reason = f" ({mv['reason']})" if mv["reason"] else ""
            click.echo(f"  {v:>4}  {mv['state']:<11} served {mv['served']:<6} errors {mv['errors']:<4}{reason}")
        if m["guard"]:
            click.echo(f"  guard {m['guard']['rules']} on {m['guard']['version']}: {m['guard_verdict'] or 'waiting'}")
        if m["shadow"]:
            s, rate = m["shadow"], m["shadow"].get("agreement_rate")
            agree = "n/a" if rate is None else f"{rate:.1%}"
            click.echo(f"  shadow {s['version']} at {s['fraction']:g}: {s.get('pairs', 0)} pairs, agreement {agree}")


@click.group("repo")
@click.option(
    "--url",
    default=lambda: os.environ.get("TRTSERVE_URL", "http://127.0.0.1:8000"),
    show_default="$TRTSERVE_URL or http://127.0.0.1:8000",
    help="The server.",
)
@click.option(
    "--admin-key",
    default=lambda: os.environ.get("TRTSERVE_ADMIN_KEY"),
    help="The server's --admin-key (or TRTSERVE_ADMIN_KEY).",
)
@click.option(
    "--timeout", type=float, default=600.0, show_default=True, help="Seconds to wait (loads wait for the engine)."
)
@click.pass_context
def command(ctx: click.Context, url: str, admin_key: str | None, timeout: float) -> None:
    """Manage the model repository of a running `trtserve run REPO_DIR`."""
    ctx.obj = {"url": url, "admin_key": admin_key, "timeout": timeout}


@command.command()
@click.option("--json", "as_json", is_flag=True, help="Print the server's JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Every model and version: state and reason, labels, weights, guard verdict, shadow agreement."""
    result = _call(ctx, "GET", "/admin/repository")
    click.echo(json.dumps(result, indent=2)) if as_json else _show(result)


@command.command()
@click.argument("model")
@click.option("--version", "versions", type=int, multiple=True, help="Load this version [the version policy's].")
@click.option("--reload", is_flag=True, help="Load a loaded version again from its dir, then drain the old engine.")
@click.pass_context
def load(ctx: click.Context, model: str, versions: tuple[int, ...], reload: bool) -> None:
    """Load MODEL's versions (in the background on the server; this waits for the result)."""
    body = {"versions": list(versions) or None, "reload": reload}
    _show(_call(ctx, "POST", f"/admin/models/{model}/load", body))


@command.command()
@click.argument("model")
@click.option("--version", "versions", type=int, multiple=True, help="Unload this version [all].")
@click.pass_context
def unload(ctx: click.Context, model: str, versions: tuple[int, ...]) -> None:
    """Drain and unload MODEL's versions: in-flight requests finish, new ones go elsewhere."""
    _show(_call(ctx, "POST", f"/admin/models/{model}/unload", {"versions": list(versions) or None}))


@command.command()
@click.argument("model")
@click.argument("version", type=int)
@click.pass_context
def promote(ctx: click.Context, model: str, version: int) -> None:
    """Move the `stable` label to VERSION; it takes all unpinned traffic."""
    _show(_call(ctx, "POST", f"/admin/models/{model}/promote", {"version": version}))


@command.command()
@click.argument("model")
@click.argument("version", type=int)
@click.option("--weight", type=float, required=True, help="Percent of unpinned traffic for VERSION.")
@click.option("--guard", help='Roll back by itself when a rule fails, e.g. "error_rate<0.01,p95_ttft<1.5x".')
@click.option("--window", type=int, default=20, show_default=True, help="Canary requests per guard verdict.")
@click.pass_context
def canary(ctx: click.Context, model: str, version: int, weight: float, guard: str | None, window: int) -> None:
    """Send --weight percent of MODEL's unpinned traffic to VERSION, the rest to stable."""
    body = {"version": version, "weight": weight, "guard": guard, "window": window}
    _show(_call(ctx, "POST", f"/admin/models/{model}/canary", body))


@command.command()
@click.argument("model")
@click.pass_context
def rollback(ctx: click.Context, model: str) -> None:
    """Every label and weight of MODEL back to the previous state, in one step."""
    _show(_call(ctx, "POST", f"/admin/models/{model}/rollback"))


@command.command()
@click.argument("model")
@click.argument("version", type=int)
@click.option("--fraction", type=float, required=True, help="Share of greedy requests mirrored to VERSION (0 stops).")
@click.pass_context
def shadow(ctx: click.Context, model: str, version: int, fraction: float) -> None:
    """Mirror a share of MODEL's requests to VERSION and record whether the greedy outputs agree."""
    _show(_call(ctx, "POST", f"/admin/models/{model}/shadow", {"version": version, "fraction": fraction}))
