"""`open_engine(engine_dir, run_config)`: the one way above the engine interface to get an engine."""

from __future__ import annotations

from pathlib import Path

from trtserve.engine.backends import backend_spec, resolve
from trtserve.engine.manifest import Manifest, verify_engine_dir
from trtserve.engine.protocol import Engine
from trtserve.engine.run_config import RuntimeConfig


def preflight(engine_dir: str | Path) -> Manifest:
    """Verify the engine dir against its manifest and ask its backend whether it can run here
    (installed, versions, GPU); raises UserError naming what to fix. Cheap next to loading."""
    path = Path(engine_dir)
    manifest = verify_engine_dir(path)
    spec = backend_spec(manifest.backend)
    if spec.preflight is not None:
        resolve(spec.preflight)(path, manifest)
    return manifest


def open_engine(engine_dir: str | Path, run_config: RuntimeConfig | None = None) -> Engine:
    """Load the engine the manifest's backend names (blocking; the engine verifies its files)."""
    from trtserve.engine.manifest import read_manifest

    path = Path(engine_dir)
    spec = backend_spec(read_manifest(path).backend)
    return resolve(spec.engine)(path, run_config or RuntimeConfig())
