"""The KV-cache budget shared by every loaded version: `--kv-cache-memory` split per model by
`kv_cache_memory` in its policy.yaml (default: the total over twice the number of LLMs, room for
a canary beside every stable version; tensor models hold no KV cache and take no share). A load
that does not fit is refused, naming what is loaded and how much is free; nothing already
serving is touched."""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.run_config import RuntimeConfig
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.version import ModelVersion

MiB = 2**20


class KVBudget:
    def __init__(self, run: RuntimeConfig, models: dict[str, RepoModel], single: bool):
        self.run, self.models, self.single = run, models, single
        # A single engine dir keeps the engine's own sizing rule (engine/kv_sizing.py) unchanged.
        self.total = None if single else int(run.kv_cache_memory or run.kv_cache_cpu_memory)

    def share(self, mv: ModelVersion) -> int:
        own = self.models[mv.model].policy.kv_cache_memory
        llms = sum(1 for m in self.models.values() if any(v.kind.kv_cache for v in m.versions.values()))
        return int(own) if own is not None else self.total // (2 * max(1, llms))

    def used(self) -> int:
        return sum(mv.kv_bytes for m in self.models.values() for mv in m.versions.values())

    def reserve(self, mv: ModelVersion) -> RuntimeConfig:
        """The run config to open `mv` with, its KV bytes counted as used; UserError if it does not fit."""
        if self.total is None or not mv.kind.kv_cache:  # tensor models hold no KV cache
            return self.run
        need, free = self.share(mv), self.total - self.used()
        if need > free:
            loaded = ", ".join(
                f"{v.name} {v.kv_bytes / MiB:.0f} MiB"
                for m in self.models.values()
                for v in m.versions.values()
                if v.kv_bytes
            )
            raise UserError(
                f"cannot load {mv.name}: its KV cache needs {need / MiB:.0f} MiB but only {free / MiB:.0f} MiB of "
                f"the {self.total / MiB:.0f} MiB --kv-cache-memory is free (loaded: {loaded or 'nothing'}); "
                "unload a version, lower kv_cache_memory in its policy.yaml or raise --kv-cache-memory"
            )
        mv.kv_bytes = need
        return self.run.model_copy(update={"kv_cache_memory": need})

    def release(self, mv: ModelVersion) -> None:
        mv.kv_bytes = 0
