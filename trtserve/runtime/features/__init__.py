"""Optional parts of the engine core (LoRA, speculation, the KV second tier, KV hand-off), attached
through one small interface of step hooks.

EngineCore calls every hook of every feature at fixed points of its step (schedule, run, sample, emit)
and of its life (a new KV cache, sleep, close); a feature that is off is its null object, whose hooks do
nothing, so the core never asks whether one is there. A new feature is one class here and one line
in EngineCore's list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtserve.engine.messages import GenerateRequest, TokenDelta
    from trtserve.models.kv_cache import PagedKVCache
    from trtserve.runtime.block_manager import BlockManager
    from trtserve.runtime.request import Request
    from trtserve.runtime.schedule import SchedulerOutput


class EngineFeature:
    """The hooks, each a no-op here: the null object of every feature."""

    def check(self, req: GenerateRequest) -> None:
        """Raise UserError for a request this feature cannot serve (before it is queued)."""

    def on_add(self, r: Request) -> None:
        """A request's first sequence was made (before it is queued)."""

    def on_cache(self, blocks: BlockManager, kv: PagedKVCache) -> None:
        """A new KV cache was made (at start, after a resize or a wake-up)."""

    def on_release_cache(self, blocks: BlockManager) -> None:
        """The KV cache is about to be released (resize, sleep); no request is running."""

    def tick(self) -> None:
        """Every step, and every idle tick of the engine thread."""

    def before_run(self, out: SchedulerOutput, kv: PagedKVCache, blocks: BlockManager) -> None:
        """The step's batch is scheduled and about to run."""

    def after_run(self, out: SchedulerOutput) -> None:
        """The step ran: its chunks' tokens are in the KV cache."""

    def on_token(self, r: Request) -> None:
        """A sequence emitted one more output token."""

    def on_verified(self, r: Request, proposed: int, accepted: int) -> None:
        """The target model scored a sequence's `proposed` proposals and kept `accepted` of them."""

    def on_finish(self, r: Request, delta: TokenDelta) -> None:
        """A sequence finished; `delta` is its last delta."""

    def on_request_done(self, r: Request) -> None:
        """Every sequence of r's request has finished (r: its first sequence)."""

    def sleep(self) -> None:
        """The engine sleeps (its KV cache released, weights on the host)."""

    def wake_up(self) -> None:
        """The engine woke up."""

    def close(self, blocks: BlockManager | None) -> None:
        """A clean stop; `blocks`: the KV cache's manager, None while asleep."""

    def invalidate(self, namespace: str | None, before_version: int | None) -> None:
        """A namespace's cached prefixes are being dropped."""


class Features(EngineFeature):
    """The engine core's features, called in order."""

    def __init__(self, *features: EngineFeature):
        self.all = features

    def check(self, req):
        for f in self.all:
            f.check(req)

    def on_add(self, r):
        for f in self.all:
            f.on_add(r)

    def on_cache(self, blocks, kv):
        for f in self.all:
            f.on_cache(blocks, kv)

    def on_release_cache(self, blocks):
        for f in self.all:
            f.on_release_cache(blocks)

    def tick(self):
        for f in self.all:
            f.tick()

    def before_run(self, out, kv, blocks):
        for f in self.all:
            f.before_run(out, kv, blocks)

    def after_run(self, out):
        for f in self.all:
            f.after_run(out)

    def on_token(self, r):
        for f in self.all:
            f.on_token(r)

    def on_verified(self, r, proposed, accepted):
        for f in self.all:
            f.on_verified(r, proposed, accepted)

    def on_finish(self, r, delta):
        for f in self.all:
            f.on_finish(r, delta)

    def on_request_done(self, r):
        for f in self.all:
            f.on_request_done(r)

    def sleep(self):
        for f in self.all:
            f.sleep()

    def wake_up(self):
        for f in self.all:
            f.wake_up()

    def close(self, blocks):
        for f in self.all:
            f.close(blocks)

    def invalidate(self, namespace, before_version):
        for f in self.all:
            f.invalidate(namespace, before_version)
