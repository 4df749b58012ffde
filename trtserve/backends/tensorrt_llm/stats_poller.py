"""Iteration stats from TensorRT-LLM on a thread of their own, one iteration at a time.

`LLM.get_stats(timeout)` drains until no iteration arrives for `timeout`: while requests decode,
iterations come faster than any useful timeout, so it returns only when the load stops (1.0, and 1.2
behaves the same), and before the first request and after an idle timeout it returns [] at once.
`LLM.get_stats_async(timeout)` (1.0 to main) yields each iteration as it arrives, so it is the one used.
What it returns in 1.0-1.2 (executor/result.py `IterationResult`, executor.py `aget_stats`):

  - one result object shared by every call, created by the first `generate_async`; before that each call
    prints "statistics are not available yet" and yields nothing;
  - its `__anext__` waits `timeout` for the next iteration and, on a timeout, marks the result done:
    every later call then yields nothing until the next `generate_async` clears the mark;
  - iterations reach it in bursts, from a dispatcher thread that sleeps 0.2 s between deliveries.

So a round waits far longer than the dispatcher's interval (a shorter wait ends the round between two
bursts and freezes the stats until the next request), and a round starts only once a request was
submitted since the last one began (before that it would only print the warning or end at once).
A request that runs for STATS_WAIT_S without a single iteration (not seen in practice) freezes the stats
until the next request: upstream offers no public way to clear the mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from trtserve.backends.tensorrt_llm.spec_counts import SpecTotals
from trtserve.backends.tensorrt_llm.stats import decode

log = logging.getLogger(__name__)
STATS_POLL_S = 1.0  # between rounds while TensorRT-LLM reports nothing (idle)
# a round ends after this long without an iteration: 10x the dispatcher's 0.2 s, and upstream's own default
STATS_WAIT_S = 2.0


class StatsPoller:
    """Keeps `latest` (the newest iteration's stats dict) and `busy` current; calls `beat()` whenever
    TensorRT-LLM shows it moves, and on idle rounds while `idle()` says nothing is running.
    The engine calls `submitted()` after each `generate_async`."""

    def __init__(
        self,
        llm,
        beat: Callable[[], None],
        idle: Callable[[], bool],
        poll_s: float = STATS_POLL_S,
        wait_s: float = STATS_WAIT_S,
    ):
        self._llm, self._beat, self._idle, self._poll_s, self._wait_s = llm, beat, idle, poll_s, wait_s
        self.latest: dict | None = None
        self.busy = IterationBusy()
        self.spec = SpecTotals()  # speculative decoding's acceptance, summed over every iteration seen
        self.rounds = 0  # finished rounds (a test hook)
        self._submitted = 0  # requests handed to TensorRT-LLM
        self._asked = 0  # ... when the last round began
        self._in_round = False
        self._closed = threading.Event()
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._loop()), name="trtserve-trtllm-stats")
        self._thread.daemon = True
        self._thread.start()

    def submitted(self) -> None:
        self._submitted += 1

    def quiet(self) -> bool:
        """No round running and none due: every iteration TensorRT-LLM delivered was taken (a test hook)."""
        return not self._in_round and self._submitted == self._asked

    def close(self) -> None:
        self._closed.set()
        aloop, task = self._aloop, self._task
        if aloop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # RuntimeError: the loop already ended
                aloop.call_soon_threadsafe(task.cancel)  # a round may be waiting wait_s for an iteration
        self._thread.join(timeout=self._poll_s + self._wait_s + 1)

    async def _loop(self) -> None:
        self._aloop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        try:
            while not self._closed.is_set():
                got = 0
                if self._submitted != self._asked:  # upstream's result yields nothing until a new request
                    self._in_round = True  # before _asked moves: quiet() must not see a gap
                    self._asked = self._submitted
                    got = await self._round()
                    self.rounds += 1
                if got == 0 and self._idle():
                    self._beat()  # nothing to do, and it answered
                if got == 0:
                    await asyncio.to_thread(self._closed.wait, self._poll_s)
        except asyncio.CancelledError:  # close()
            return

    async def _round(self) -> int:
        got = 0
        try:
            async for item in self._llm.get_stats_async(timeout=self._wait_s):
                self._take(decode([item]))
                got += 1
                if self._closed.is_set():
                    break
        except Exception as err:  # stats are best-effort; serving goes on
            log.debug("get_stats_async failed: %s", err)
        finally:
            self._in_round = False
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
