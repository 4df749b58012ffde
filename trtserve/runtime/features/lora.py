"""LoRA adapters as an engine-core feature: which requests may run (max_loras active), their
weights for the runner, and their per-adapter counts. `NoLora` is the feature when the engine serves
no adapters: it refuses requests that name one, and every request may run."""

from __future__ import annotations

from pathlib import Path

from trtserve.engine.adapters import AdapterRef, LoraConfig
from trtserve.engine.errors import UnsupportedError, UserError
from trtserve.engine.layout import LORA_DIR
from trtserve.engine.stats import AdapterStats
from trtserve.models.lora import LoraWeights
from trtserve.models.vision_family import vision_family_named
from trtserve.runtime.adapter_cache import AdapterCache
from trtserve.runtime.adapters import Adapters
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.request import Request


class NoLora(EngineFeature):
    """No adapters are served: every request runs on the base model."""

    def check(self, req) -> None:
        if req.options.adapter is not None:
            raise UserError(
                f"this engine serves no LoRA adapters (asked for {req.options.adapter.name}); "
                "start it with the `lora` engine option, or send the request to the base model"
            )

    def served(self, name: str) -> Adapters:
        raise UnsupportedError(
            f"this engine serves no LoRA adapters (asked for {name}); start it with the `lora` engine option"
        )

    def ref(self, name: str) -> AdapterRef:
        """The served adapter named `name`; UserError if there is none."""
        return self.served(name).ref(name)

    def load(self, name: str, path: str | Path) -> AdapterRef:
        """Serve (or replace) adapter `name` from `path`, between steps (runtime/adapters.py: add)."""
        return self.served(name).add(name, path)

    def unload(self, name: str) -> None:
        self.served(name).remove(name)

    def refs(self) -> list[AdapterRef]:
        return []

    # the scheduler's gate: without adapters every request may run
    def can_run(self, r: Request) -> bool:
        return True

    def acquire(self, r: Request) -> bool:
        return True

    def release(self, r: Request) -> None:
        pass

    def weights(self, r: Request) -> LoraWeights | None:
        return None

    @property
    def enabled(self) -> bool:
        return False

    def stats(self) -> AdapterStats:
        return AdapterStats()


class LoraGate(NoLora):
    """The scheduler's and runner's side: at most max_loras adapters active (adapter_cache.py)."""

    def __init__(self, cache: AdapterCache[LoraWeights]):
        self.cache = cache

    def can_run(self, r: Request) -> bool:
        """False while max_loras other adapters are active."""
        return r.options.adapter is None or self.cache.can_acquire(r.options.adapter)

    def acquire(self, r: Request) -> bool:
        """Hold r's adapter while it runs (loading it if evicted); raises if it would not load."""
        return r.options.adapter is None or self.cache.acquire(r.options.adapter)

    def release(self, r: Request) -> None:
        if r.options.adapter is not None:
            self.cache.release(r.options.adapter)

    def weights(self, r: Request) -> LoraWeights | None:
        """r's adapter's weights (active: the scheduler holds it)."""
        return self.cache.weights(r.options.adapter) if r.options.adapter is not None else None

    @property
    def enabled(self) -> bool:
        return True


class Lora(LoraGate):
    """The served adapters (runtime/adapters.py), their gate and their per-adapter counts."""

    def __init__(self, adapters: Adapters):
        super().__init__(adapters.cache)
        self.adapters = adapters

    def check(self, req) -> None:
        if req.options.adapter is not None:
            self.adapters.check(req.options.adapter)

    def served(self, name: str) -> Adapters:
        return self.adapters

    def refs(self) -> list[AdapterRef]:
        return self.adapters.refs()

    def on_add(self, r: Request) -> None:
        if r.options.adapter is not None:
            self.adapters.enter(r.options.adapter)

    def after_run(self, out) -> None:
        for c in out.chunks:
            if c.request.options.adapter is not None:
                computed = max(min(c.end, c.request.num_prompt_tokens) - c.start, 0)
                self.adapters.count_tokens(c.request.options.adapter, prompt=computed)

    def on_token(self, r: Request) -> None:
        if r.options.adapter is not None:
            self.adapters.count_tokens(r.options.adapter, generated=1)

    def on_request_done(self, r: Request) -> None:
        if r.options.adapter is not None:
            self.adapters.leave(r.options.adapter)

    def stats(self) -> AdapterStats:
        return AdapterStats(self.cache.loads, self.cache.evictions, self.cache.hits, dict(self.adapters.counts))


def make_lora(engine: LoadedEngine, config: LoraConfig | None) -> NoLora:
    """The adapters the engine dir packs and the `lora` option names, loaded and checked now. An engine
    dir that packs adapters serves them without the option."""
    packed = engine.path / LORA_DIR
    packed_dirs: dict[str, Path] = (
        {p.name: p for p in sorted(packed.iterdir()) if p.is_dir()} if packed.is_dir() else {}
    )
    config = config or (LoraConfig() if packed_dirs else None)
    if config is None:
        return NoLora()
    vision = engine.manifest.vision
    family = vision_family_named(None if vision is None else vision.family)  # its adapters name the language model
    return Lora(Adapters(config, engine.model, packed_dirs, family))
