"""`trtserve replay RECEIPT.json --engine ENGINE_DIR | --server URL`: run a receipt's request again
and report `identical` or the first differing position (exit 0 identical, 1 differs, 2 refused)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from trtserve.engine.errors import UserError


def load_receipt(path: Path):
    from pydantic import ValidationError

    from trtserve.serve.receipts.model import Receipt

    try:
        return Receipt.model_validate_json(path.read_bytes())
    except OSError as err:
        raise UserError(
            f"cannot read receipt {path} ({err.strerror}); give a file saved by `trtserve receipt show`"
        ) from None
    except ValidationError as err:
        raise UserError(
            f"{path} is not a trtserve receipt ({err.errors()[0]['msg']}); fetch it with `trtserve receipt show`"
        ) from None


def replay_offline(receipt, engine_dir: Path, prompt_ids, allow_other_engine: bool, kv_cache_memory: str | None):
    """Run it with the offline engine (torch), with the engine options the receipt records."""
    import trtserve
    from trtserve.engine.backends import backend_spec
    from trtserve.engine.manifest import engine_fingerprint, verify_engine_dir
    from trtserve.serve.receipts.model import EngineIdentity
    from trtserve.serve.receipts.replay import (
        ReplayResult,
        adapter_of,
        check_engine,
        options_of,
        params_of,
        prompt_of,
        sequences_of,
    )

    manifest = verify_engine_dir(engine_dir)
    if manifest.backend != "torch":
        raise UserError(f"{engine_dir} is a {manifest.backend} engine; replay it with --server on a server running it")
    options = options_of(receipt)
    identity = EngineIdentity(  # what the torch backend's Engine.info would say, before loading anything
        fingerprint=engine_fingerprint(manifest),
        backend=manifest.backend,
        platform=backend_spec(manifest.backend).platform,
        backend_version=trtserve.__version__,
        trtserve_version=trtserve.__version__,
        options=options.identity(),
    )
    other = check_engine(receipt, identity, allow_other_engine)
    prompt, params = prompt_of(receipt, prompt_ids), params_of(receipt)
    from trtserve.build.inspect import parse_memory  # torch is imported only once the replay may run
    from trtserve.engine.run_config import RuntimeConfig
    from trtserve.llm import LLM

    budget = parse_memory(kv_cache_memory, "--kv-cache-memory") if kv_cache_memory else None
    llm = LLM(engine_dir, RuntimeConfig(**options.model_dump()), kv_cache_memory=budget)
    # an adapter packed in the engine dir (`build --lora`) replays offline; others need --server
    adapter = adapter_of(receipt, llm.core.lora.refs())
    (out,) = llm.generate([prompt], params, adapter=adapter.name if adapter is not None else None)
    outputs = sequences_of(out.outputs)
    return ReplayResult(engine=identity, outputs=outputs, cached_tokens=out.num_cached_tokens), other


def replay_on_server(receipt, server: str, prompt_ids, allow_other_engine: bool, admin_key: str | None):
    import httpx

    from trtserve.cli.receipt import admin_headers, server_error
    from trtserve.serve.receipts.replay import ReplayResult

    body = {
        "receipt": receipt.model_dump(mode="json"),
        "prompt_token_ids": prompt_ids,
        "allow_other_engine": allow_other_engine,
    }
    try:
        resp = httpx.post(f"{server.rstrip('/')}/v1/replay", json=body, headers=admin_headers(admin_key), timeout=600)
    except httpx.HTTPError as err:
        raise UserError(f"cannot reach {server} ({err}); check --server") from None
    if resp.status_code != 200:
        raise server_error(resp, f"replaying {receipt.id}")
    result = ReplayResult.model_validate(resp.json())
    return result, result.engine.fingerprint != receipt.engine.fingerprint


@click.command("replay")
@click.argument("receipt_file", type=click.Path(path_type=Path))
@click.option("--engine", "engine_dir", type=click.Path(path_type=Path), help="Replay offline on this engine dir.")
@click.option("--server", help="Replay on this server (its admin key), e.g. http://127.0.0.1:8000.")
@click.option("--allow-other-engine", is_flag=True, help="Replay even if the engine's fingerprint differs.")
@click.option(
    "--prompt-ids", type=click.Path(path_type=Path), help="JSON list of the prompt's token ids (hashes receipts)."
)
@click.option("--admin-key", help="The server's admin key [TRTSERVE_ADMIN_KEY].")
@click.option("--kv-cache-memory", help="Offline KV-cache budget, e.g. 1GiB [what the request needs].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(
    receipt_file: Path,
    engine_dir: Path | None,
    server: str | None,
    allow_other_engine: bool,
    prompt_ids: Path | None,
    admin_key: str | None,
    kv_cache_memory: str | None,
    as_json: bool,
) -> None:
    """Re-run the request of RECEIPT_FILE and compare its tokens and logprobs with the receipt's."""
    from trtserve.serve.receipts.replay import compare

    if (engine_dir is None) == (server is None):
        raise UserError("give exactly one of --engine ENGINE_DIR (offline) or --server URL")
    receipt = load_receipt(receipt_file)
    ids = _prompt_ids(prompt_ids)
    if engine_dir is not None:
        result, other = replay_offline(receipt, engine_dir, ids, allow_other_engine, kv_cache_memory)
    else:
        result, other = replay_on_server(receipt, server, ids, allow_other_engine, admin_key)  # type: ignore[arg-type]
    report = compare(receipt, result, other)
    click.echo(report.model_dump_json(indent=2) if as_json else report.text())
    sys.exit(0 if report.identical else 1)


def _prompt_ids(path: Path | None) -> list[int] | None:
    if path is None:
        return None
    try:
        ids = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(f"cannot read --prompt-ids {path} ({err}); give a JSON list of token ids") from None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise UserError(f"--prompt-ids {path} must hold a JSON list of integer token ids")
    return ids
