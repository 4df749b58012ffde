"""`trtserve dynamo ENGINE_DIR --role aggregated|prefill|decode`: the engine as an NVIDIA Dynamo worker."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from trtserve.dynamo.settings import ROLES, TRANSPORTS


@click.command("dynamo")
@click.argument("engine_dir", type=click.Path(path_type=Path))
@click.option("--role", type=click.Choice(ROLES), default="aggregated", show_default=True)
@click.option("--namespace", default="dynamo", show_default=True, help="Dynamo namespace the worker joins.")
@click.option("--served-model-name", help="The model name clients send [the engine dir's name].")
@click.option("--kv-cache-memory", help="KV-cache budget, e.g. 2GiB.")
@click.option("--discovery-backend", type=click.Choice(["file", "etcd", "mem"]), default="file", show_default=True)
@click.option("--transport", type=click.Choice(TRANSPORTS), default="auto", show_default=True, help="How KV moves.")
@click.option(
    "--hold-s", default=30.0, show_default=True, type=click.FloatRange(0.1), help="Unpulled prefill KV lives this long."
)
@click.option("--dry-run", is_flag=True, help="Print the frontend and worker command lines for each role; run nothing.")
def command(engine_dir: Path, role: str, namespace: str, served_model_name: str | None, kv_cache_memory, **rest):
    """Serve ENGINE_DIR as a Dynamo worker (needs trtserve[dynamo]); a frontend routes to it (docs/dynamo.md)."""
    from trtserve.dynamo.settings import WorkerSettings
    from trtserve.engine.errors import UserError
    from trtserve.engine.layout import read_engine_config
    from trtserve.engine.manifest import read_manifest
    from trtserve.engine.run_config import RuntimeConfig

    if not (engine_dir / "manifest.json").is_file():
        raise UserError(f"{engine_dir} is not an engine dir (no manifest.json); build one with `trtserve build`")
    backend = read_manifest(engine_dir).backend
    name = served_model_name or engine_dir.resolve().name
    if rest.pop("dry_run"):
        _dry_run(engine_dir, backend, namespace, name, read_engine_config(engine_dir).build_config)
        return
    if role != "aggregated" and backend != "torch":
        raise UserError(
            f"a {backend} engine dir cannot be a trtserve {role} worker (only the torch engine hands KV over); "
            "run it under `python -m dynamo.trtllm` (--dry-run prints the lines) or use --role aggregated"
        )
    run_config = RuntimeConfig(kv_cache_memory=kv_cache_memory) if kv_cache_memory else RuntimeConfig()
    settings = WorkerSettings(engine_dir, role, namespace, name, run_config=run_config, **rest)
    _serve(settings)


def _dry_run(engine_dir: Path, backend: str, namespace: str, name: str, build) -> None:
    from trtserve.dynamo.trtllm import dry_run_lines

    transceiver = "DEFAULT"
    if backend == "trtllm":
        from trtserve.backends.tensorrt_llm.capabilities import for_planning
        from trtserve.backends.tensorrt_llm.llm import read_options

        read_options(engine_dir)  # the options file trtserve wrote must be there and readable
        transceiver = for_planning(None).transceiver_default  # the installed release's spelling, else 1.2's
    block = build.plugin_config.tokens_per_block
    for line in dry_run_lines(engine_dir, backend, namespace, name, block, transceiver):
        click.echo(line)


def _serve(settings) -> None:
    from trtserve.engine.errors import UserError

    try:
        from dynamo.common.backend.run import run

        from trtserve.dynamo.worker import TrtserveWorker, worker_config
    except ImportError as err:
        raise UserError(f"Dynamo is not installed ({err}); install trtserve[dynamo] with scripts/setup.sh") from None
    from trtserve.dynamo.model_dir import model_dir_for, write_model_dir

    root = Path(tempfile.gettempdir()) / "trtserve-dynamo"
    model_dir = write_model_dir(settings.engine_dir, model_dir_for(settings.engine_dir, settings.name, root))

    async def factory(argv=None):
        return TrtserveWorker(settings, str(model_dir)), worker_config(settings, str(model_dir))

    run(TrtserveWorker, engine_factory=factory)
