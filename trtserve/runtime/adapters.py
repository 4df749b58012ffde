"""The torch engine's LoRA adapters: which names it serves (each a dir and a content hash) and their
weights in memory (adapter_cache.py). Built from the `lora` engine option (engine/adapters.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from trtserve.engine.adapters import AdapterRef, LoraConfig, adapter_ref
from trtserve.engine.errors import UserError
from trtserve.engine.stats import AdapterCounts
from trtserve.models.decoder import DecoderModel
from trtserve.models.lora import LoraWeights, load_lora
from trtserve.models.vision_family import VisionFamily
from trtserve.runtime.adapter_cache import AdapterCache

log = logging.getLogger(__name__)


class Adapters:
    def __init__(
        self,
        config: LoraConfig,
        model: DecoderModel,
        packed: dict[str, Path] | None = None,
        vision: VisionFamily | None = None,
    ):
        """packed: the adapters the engine dir packs (`build --lora`), served beside the config's; vision: a
        vision-language model's family (its adapters apply to the language model)."""
        self.config, self.model, self.vision = config, model, vision
        self._paths: dict[AdapterRef, Path] = {}  # every served adapter -> its dir
        self._by_name: dict[str, AdapterRef] = {}  # the selectable ones
        self._users: dict[AdapterRef, int] = {}  # submitted, unfinished requests of each adapter
        # replaced or unloaded adapters whose submitted requests still run: their weights, kept here
        # because their files may already hold the replacement
        self._retired: dict[AdapterRef, LoraWeights] = {}
        self.counts: dict[str, AdapterCounts] = {}  # by adapter name, since the engine started
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
        when it does not fit the base model. A same-named adapter with other contents is replaced:
        requests already submitted under it finish on its weights (`retire`)."""
        ref = adapter_ref(name, path)
        old = self._by_name.get(name)
        if old == ref:
            return ref  # the same files again: nothing changes
        known = self._paths.get(ref)
        held = self.cache.peek(old) if old is not None else None  # before loading the new one may evict it
        self._paths[ref] = Path(path)
        try:
            start = time.perf_counter()
            self.cache.preload(ref)
        except BaseException:
            if known is None:
                del self._paths[ref]
            raise
        self._by_name[name] = ref
        self._retired.pop(ref, None)  # a retired adapter loaded again under its name serves again
        log.info("LoRA adapter %s loaded from %s in %.3f s", ref, path, time.perf_counter() - start)
        if old is not None:
            self._retire(old, held)
        return ref

    def remove(self, name: str) -> AdapterRef:
        """Stop serving `name`: later requests naming it are refused; submitted ones finish on it.
        UserError if no adapter of that name is served."""
        ref = self.ref(name)
        del self._by_name[name]
        self._retire(ref)
        return ref

    def enter(self, ref: AdapterRef) -> None:
        """A request under `ref` was submitted to the engine (it holds the weights until `leave`)."""
        self._users[ref] = self._users.get(ref, 0) + 1
        c = self.counts.get(ref.name, AdapterCounts())
        self.counts[ref.name] = replace(c, requests=c.requests + 1)

    def leave(self, ref: AdapterRef) -> None:
        """That request has finished; the last one of a retired adapter frees its weights."""
        n = self._users[ref] - 1
        if n:
            self._users[ref] = n
            return
        del self._users[ref]
        if ref in self._retired:
            self._forget(ref)

    def count_tokens(self, ref: AdapterRef, prompt: int = 0, generated: int = 0) -> None:
        c = self.counts.get(ref.name, AdapterCounts())
        self.counts[ref.name] = replace(
            c, prompt_tokens=c.prompt_tokens + prompt, generated_tokens=c.generated_tokens + generated
        )

    def _retire(self, ref: AdapterRef, held: LoraWeights | None = None) -> None:
        """No longer selectable; its weights stay (in memory, whatever its files now hold) while
        submitted requests use it. held: its weights, when the caller took them from the cache."""
        if not self._users.get(ref):
            self._forget(ref)
            return
        held = held if held is not None else self.cache.peek(ref)
        try:
            self._retired[ref] = held if held is not None else self._load(ref)
        except UserError:  # its files already hold other weights: its waiting requests fail when scheduled
            log.warning("adapter %s was replaced while its requests waited and its old files are gone", ref)
            self._paths.pop(ref, None)

    def _forget(self, ref: AdapterRef) -> None:
        self._retired.pop(ref, None)
        if ref not in self._by_name.values():
            self.cache.drop(ref)  # unpinned: no request holds it
            self._paths.pop(ref, None)

    def ref(self, name: str) -> AdapterRef:
        if name not in self._by_name:
            raise UserError(f"no LoRA adapter named {name!r} is served; serving: {self._names()}")
        return self._by_name[name]

    def refs(self) -> list[AdapterRef]:
        return list(self._by_name.values())

    def check(self, ref: AdapterRef) -> None:
        """UserError unless `ref` is served now, with these contents (or was replaced or unloaded so
        recently that requests submitted under it still run: a request resolved just before finishes too)."""
        if self._by_name.get(ref.name) != ref and ref not in self._retired:
            known = self._by_name.get(ref.name)
            if known is None:
                raise UserError(f"no LoRA adapter named {ref.name!r} is served; serving: {self._names()}")
            raise UserError(f"adapter {ref.name} now has other weights ({known.content_hash}); resend the request")

    def _names(self) -> str:
        return ", ".join(sorted(self._by_name)) or "none"

    def _load(self, ref: AdapterRef) -> LoraWeights:
        if ref in self._retired:
            return self._retired[ref]
        path = self._paths.get(ref)
        if path is None:
            raise UserError(f"adapter {ref} was replaced or unloaded and its files changed; resend the request")
        if adapter_ref(ref.name, path) != ref:
            raise UserError(f"adapter {ref.name}'s files in {path} changed since it was loaded; load it again")
        m = self.model
        return load_lora(ref, path, m.family, m.cfg, self.config.max_lora_rank, m.dtype, m.device, self.vision)
