"""The LoRA adapters in memory and those active in the batch: one owner, a small API.

An adapter is *active* while a running request holds it (`acquire` .. `release`, counted per request);
at most `max_active` (the engine's max_loras) are active at once, so a step never runs more. It is
*resident* while its weights are in memory: at most `capacity` (max_cpu_loras) are, in LRU order
(least recently released first). Active adapters are pinned: never evicted. Acquiring an adapter that
is not resident loads it (from its dir: `load`), evicting the least recently used unpinned one when
the cache is full. capacity >= max_active, so a pinned-full cache cannot happen.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

W = TypeVar("W")


class AdapterCache(Generic[W]):
    def __init__(self, max_active: int, capacity: int, load: Callable[[Hashable], W]):
        if capacity < max_active:
            raise ValueError(f"capacity ({capacity}) must be at least max_active ({max_active})")
        self.max_active, self.capacity, self._load = max_active, capacity, load
        self._resident: OrderedDict[Hashable, W] = OrderedDict()  # least recently used first
        self._pins: dict[Hashable, int] = {}  # active adapter -> requests holding it (> 0)
        self.loads = self.evictions = self.hits = 0

    # ---- queries -------------------------------------------------------------------------
    def can_acquire(self, ref: Hashable) -> bool:
        """Whether `acquire(ref)` would succeed now: it is active, or a slot is free."""
        return ref in self._pins or len(self._pins) < self.max_active

    def weights(self, ref: Hashable) -> W:
        """An active adapter's weights."""
        if ref not in self._pins:
            raise KeyError(f"adapter {ref} is not active")
        return self._resident[ref]

    def active(self) -> dict[Hashable, int]:
        """Active adapters -> the requests holding each."""
        return dict(self._pins)

    def peek(self, ref: Hashable) -> W | None:
        """`ref`'s weights if they are in memory (no change to the LRU order), else None."""
        return self._resident.get(ref)

    def resident(self) -> list[Hashable]:
        """Adapters in memory, least recently used first."""
        return list(self._resident)

    # ---- changes -------------------------------------------------------------------------
    def acquire(self, ref: Hashable) -> bool:
        """Hold `ref` for one request, loading it if it is not in memory; False (no change) when
        max_active other adapters are active. A load's exception propagates, leaving no change."""
        if not self.can_acquire(ref):
            return False
        if ref not in self._pins:
            self._make_resident(ref)
        else:
            self.hits += 1
        self._pins[ref] = self._pins.get(ref, 0) + 1
        return True

    def release(self, ref: Hashable) -> None:
        """One request no longer holds `ref`; the last one unpins it (most recently used)."""
        n = self._pins[ref] - 1
        if n:
            self._pins[ref] = n
        else:
            del self._pins[ref]
            self._resident.move_to_end(ref)

    def preload(self, ref: Hashable) -> None:
        """Load `ref` now (an adapter added at start or at run time), as the most recently used."""
        self._make_resident(ref)

    def drop(self, ref: Hashable) -> None:
        """Forget `ref`'s weights (its adapter was unloaded); ValueError while a request holds it."""
        if ref in self._pins:
            raise ValueError(f"adapter {ref} is in use by {self._pins[ref]} running requests")
        self._resident.pop(ref, None)

    def _make_resident(self, ref: Hashable) -> None:
        if ref in self._resident:
            self.hits += 1
            self._resident.move_to_end(ref)
            return
        weights = self._load(ref)  # before any eviction: a failed load changes nothing
        while len(self._resident) >= self.capacity:
            victim = next(r for r in self._resident if r not in self._pins)  # exists: capacity >= max_active
            del self._resident[victim]
            self.evictions += 1
        self._resident[ref] = weights
        self.loads += 1
