"""Constrained requests waiting for their grammar (runtime/guided.py compiles it on a worker thread):
each joins the scheduler's queue once its grammar is ready, or fails if it would not compile. A traced
request's wait is timed onto its timeline (engine/timeline.py)."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace

from trtserve.engine.sampling import GuidedDecoding
from trtserve.engine.timeline import GrammarCompile
from trtserve.runtime.guided import Grammars
from trtserve.runtime.request import Request

IDLE_WAIT_S = 0.02  # with nothing else to run, wait this long for a compile rather than spin


class GrammarQueue:
    def __init__(self, grammars: Grammars):
        self.grammars = grammars
        self._waiting: list[tuple[Request, Future]] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def submit(self, r: Request, guide: GuidedDecoding) -> None:
        if r.timeline is not None:  # its wait ends when it joins the queue (`poll`)
            now = time.monotonic()
            r.timeline.grammar = GrammarCompile(now, now, guide.kind, self.grammars.is_cached(guide))
        self._waiting.append((r, self.grammars.submit(guide)))

    def poll(self, wait_if_idle: bool) -> tuple[list[Request], list[tuple[Request, BaseException]]]:
        """(the requests whose grammar is ready, each with its matcher; those whose compile failed).
        wait_if_idle: nothing else runs, so wait a little for a compile to finish."""
        if not self._waiting:
            return [], []
        if wait_if_idle:
            wait([f for _, f in self._waiting], timeout=IDLE_WAIT_S, return_when=FIRST_COMPLETED)
        ready, failed, still = [], [], []
        for r, fut in self._waiting:
            if r.is_finished:  # aborted while its grammar compiled
                continue
            if not fut.done():
                still.append((r, fut))
                continue
            if r.timeline is not None:
                r.timeline.grammar = replace(r.timeline.grammar, ended=time.monotonic())
            if (err := fut.exception()) is not None:
                failed.append((r, err))
            else:
                r.guided = self.grammars.state_of(fut.result(), r.options.thinking_span)  # not the LRU: it may evict it
                ready.append(r)
        self._waiting = still
        return ready, failed
