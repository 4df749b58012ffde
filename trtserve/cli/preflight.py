"""`trtserve run`'s engine-dir check, overlapped with the imports a start needs anyway.

Checking an engine dir hashes every file (sha256 releases the GIL), and serving it imports the web
stack, the backend (torch) and the tokenizer's library (Python, under the GIL). Hashing on a
thread from the command's first line while this one imports makes the two cost about the longer of
them instead of their sum. The check proper runs after, unchanged: the files hashed meanwhile are
not hashed again (engine/hashing.py: sha256_file_once), and its errors are its own.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from pathlib import Path

from trtserve.engine.layout import ENGINE_CONFIG, read_engine_config
from trtserve.engine.manifest import MANIFEST, read_manifest, verify_engine_dir


class Preflight:
    def __init__(self, engine_dir: Path):
        self.engine_dir = engine_dir
        self._hashing = threading.Thread(target=self._hash, name="trtserve-preflight", daemon=True)
        self._hashing.start()

    def _hash(self) -> None:
        if (self.engine_dir / MANIFEST).is_file():
            with contextlib.suppress(Exception):  # check() reports what is wrong, in its own words
                verify_engine_dir(self.engine_dir)

    def check(self, kv_cache_dtype: str = "auto") -> None:
        """Import what opening the engine will (its backend, the tokenizer's library) while the
        hashing finishes, then run the real check (serve/repository/scan.py: preflight_dir), and the
        run's kv_cache_dtype against an engine dir's config (a repository's versions check theirs as they load)."""
        from trtserve.serve.repository.scan import is_engine_dir, preflight_dir
        from trtserve.serve.telemetry.startup import verifying

        with contextlib.suppress(Exception):  # a start that fails says why in the check below
            _import_for(self.engine_dir)
        with verifying():  # only the wait the imports did not hide counts as the `verify` phase
            self._hashing.join()
            if is_engine_dir(self.engine_dir) or not self.engine_dir.is_dir():
                preflight_dir(self.engine_dir)
        if kv_cache_dtype != "auto" and _llm_torch_engine(self.engine_dir):  # other backends refuse it at load
            from trtserve.engine.kv_sizing import check_kv_cache_dtype

            check_kv_cache_dtype(read_engine_config(self.engine_dir).pretrained_config, kv_cache_dtype)


def _llm_torch_engine(engine_dir: Path) -> bool:
    return (
        (engine_dir / MANIFEST).is_file()
        and (engine_dir / ENGINE_CONFIG).is_file()
        and read_manifest(engine_dir).backend == "torch"
    )


def _import_for(engine_dir: Path) -> None:
    from trtserve.engine.backends import backend_spec

    if not (engine_dir / MANIFEST).is_file():
        return
    module = backend_spec(read_manifest(engine_dir).backend).engine.partition(":")[0]
    importlib.import_module(module)
    import tokenizers  # noqa: F401 - engine/tokenizer.py, what load_tokenizer reads the tokenizer with
