"""The torch engine's LoRA adapters: which names it serves (each a dir and a content hash) and their
weights in memory (adapter_cache.py). Built from the `lora` engine option (engine/adapters.py)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from trtserve.engine.adapters import AdapterRef, LoraConfig, adapter_ref
from trtserve.engine.errors import UserError
from trtserve.models.decoder import DecoderModel
from trtserve.models.lora import LoraWeights, load_lora
from trtserve.runtime.adapter_cache import AdapterCache

log = logging.getLogger(__name__)


class Adapters:
    def __init__(self, config: LoraConfig, model: DecoderModel, packed: dict[str, Path] | None = None):
        """packed: the adapters the engine dir packs (`build --lora`), served beside the config's."""
        self.config, self.model = config, model
        self._paths: dict[AdapterRef, Path] = {}  # every served adapter -> its dir
        self._by_name: dict[str, AdapterRef] = {}
        self.cache: AdapterCache[LoraWeights] = AdapterCache(config.max_loras, config.max_cpu_loras, self._load)
        packed = packed or {}
        for name in packed.keys() & config.adapters.keys():
            raise UserError(
                f"adapter {name} is packed in the engine dir and named again in the run config's lora.adapters; "
                "give the run config's adapter another name"
            )
        for name, path in (packed | config.adapters).items():
            self.add(name, path)

    def add(self, name: str, path: str | Path) -> AdapterRef:
        """Serve the PEFT adapter at `path` as `name` (its weights loaded and checked now); UserError
        when the name is taken by another adapter or the adapter does not fit the base model."""
        ref = adapter_ref(name, path)
        old = self._by_name.get(name)
        if old is not None and old != ref:
            raise UserError(f"an adapter named {name} is already served; unload it first or pick another name")
        self._paths[ref] = Path(path)
        try:
            start = time.perf_counter()
            self.cache.preload(ref)
        except BaseException:
            del self._paths[ref]
            raise
        self._by_name[name] = ref
        log.info("LoRA adapter %s loaded from %s in %.3f s", ref, path, time.perf_counter() - start)
        return ref

    def remove(self, name: str) -> AdapterRef:
        """Stop serving `name`; UserError if it is unknown or a running request uses it."""
        ref = self.ref(name)
        try:
            self.cache.drop(ref)
        except ValueError as err:
            raise UserError(f"adapter {name} cannot be unloaded now: {err}; retry when they finish") from None
        del self._by_name[name], self._paths[ref]
        return ref

    def ref(self, name: str) -> AdapterRef:
        if name not in self._by_name:
            raise UserError(f"no LoRA adapter named {name!r} is served; serving: {self._names()}")
        return self._by_name[name]

    def refs(self) -> list[AdapterRef]:
        return list(self._by_name.values())

    def check(self, ref: AdapterRef) -> None:
        """UserError unless `ref` is served now, with these contents."""
        if self._by_name.get(ref.name) != ref:
            known = self._by_name.get(ref.name)
            if known is None:
                raise UserError(f"no LoRA adapter named {ref.name!r} is served; serving: {self._names()}")
            raise UserError(f"adapter {ref.name} now has other weights ({known.content_hash}); resend the request")

    def _names(self) -> str:
        return ", ".join(sorted(self._by_name)) or "none"

    def _load(self, ref: AdapterRef) -> LoraWeights:
        path = self._paths[ref]
        if adapter_ref(ref.name, path) != ref:
            raise UserError(f"adapter {ref.name}'s files in {path} changed since it was loaded; load it again")
        m = self.model
        return load_lora(ref, path, m.family, m.cfg, self.config.max_lora_rank, m.dtype, m.device)
