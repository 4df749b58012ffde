"""Iteration stats from TensorRT-LLM on a thread of their own, one iteration at a time.

`LLM.get_stats(timeout)` drains until no iteration arrives for `timeout`: while requests decode,
iterations come faster than any useful timeout, so it returns only when the load stops (1.0, and 1.2
behaves the same), and before the first request and after an idle timeout it returns [] at once.
`LLM.get_stats_async(timeout)` (1.0 to main) yields each iteration as it arrives, so the latest one is
taken as it comes; an empty round (idle) is followed by a wait of our own, so the loop never spins.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from trtserve.backends.tensorrt_llm.spec_counts import SpecTotals
from trtserve.backends.tensorrt_llm.stats import decode

log = logging.getLogger(__name__)
STATS_POLL_S = 1.0  # between rounds while TensorRT-LLM reports nothing (idle)
STATS_WAIT_S = 0.1  # a round ends after this long without an iteration


class StatsPoller:
    """Keeps `latest` (the newest iteration's stats dict) and `busy` current; calls `beat()` whenever
    TensorRT-LLM shows it moves, and on idle rounds while `idle()` says nothing is running."""

    def __init__(self, llm, beat: Callable[[], None], idle: Callable[[], bool], poll_s: float = STATS_POLL_S):
        self._llm, self._beat, self._idle, self._poll_s = llm, beat, idle, poll_s
        self.latest: dict | None = None
        self.busy = IterationBusy()
        self.spec = SpecTotals()  # speculative decoding's acceptance, summed over every iteration seen
        self.rounds = 0  # finished rounds (a test hook)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._loop()), name="trtserve-trtllm-stats")
        self._thread.daemon = True
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=self._poll_s + 4 * STATS_WAIT_S + 1)

    async def _loop(self) -> None:
        while not self._closed.is_set():
            got = await self._round()
            self.rounds += 1
            if got == 0 and self._idle():
                self._beat()  # nothing to do, and it answered
            if got == 0:
                await asyncio.to_thread(self._closed.wait, self._poll_s)

    async def _round(self) -> int:
        got = 0
        try:
            async for item in self._llm.get_stats_async(timeout=STATS_WAIT_S):
                self._take(decode([item]))
                got += 1
                if self._closed.is_set():
                    break
        except Exception as err:  # stats are best-effort; serving goes on
            log.debug("get_stats_async failed: %s", err)
        return got

    def _take(self, iterations: list[dict]) -> None:
        self.busy.add(iterations)
        self.spec.add(iterations)
        if iterations:
            self.latest = iterations[-1]
            self._beat()


class IterationBusy:
    """The executor's busy seconds: the sum of each iteration's iterLatencyMS since the first one seen.

    Only a sum over every iteration is the truth: once one is missed (TensorRT-LLM's bounded stats
    queue overflowed between polls) or comes without its latency, `seconds()` is None from then on.
    """

    def __init__(self):
        self._ms = 0.0
        self._last: int | None = None  # the last iteration number seen
        self.lost = False

    def add(self, iterations: list[dict]) -> None:
        for it in iterations:
            number, ms = it.get("iter"), it.get("iterLatencyMS")
            if number is None or ms is None or (self._last is not None and int(number) != self._last + 1):
                if not self.lost:
                    log.warning("TensorRT-LLM iteration stats have a gap: engine busy time is no longer reported")
                self.lost = True
                return
            self._last = int(number)
            self._ms += float(ms)

    def seconds(self) -> float | None:
        return None if self.lost else self._ms / 1000.0
