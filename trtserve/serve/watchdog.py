"""The engine watchdog: readiness that tells the truth, and an exit a supervisor can act on.

Checked every tick of uvicorn's main loop (serve/server.py, ~10 per second):
- stalled: an engine's loop has not turned (Engine.heartbeat: a step, an idle tick) for
  `stall_timeout` s while requests are in flight -> readiness false (a load balancer stops sending),
  until it moves again.
- dead: an engine that was serving reports health() false -> readiness false at once; its
  in-flight requests have already failed with 503 (generation.py); after `dead_exit_after` s the
  process exits with EXIT_ENGINE_DEAD so that Kubernetes or systemd restarts it. A server that
  answered 503 forever would never be restarted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from trtserve.serve.state import ServerState

log = logging.getLogger(__name__)
EXIT_ENGINE_DEAD = 3  # the process's exit status when an engine died (README "Operations")


@dataclass
class Verdict:
    stalled: bool  # some engine made no progress for stall_timeout s while work waited
    dead: str | None  # the first dead engine's model version, if any


class Watchdog:
    def __init__(self, server: ServerState):
        self.server = server
        self.dead_since: float | None = None

    def inspect(self, now: float) -> Verdict:
        repo = self.server.repository
        if repo is None:
            return Verdict(False, None)
        stalled, dead = False, None
        for mv in repo.versions():
            engine = mv.engine
            if engine is None or mv.state != "READY":  # not mv.ready: that is false for a dead engine too
                continue
            if not engine.health():
                dead = dead or mv.name
                continue
            if mv.in_flight > 0 and now - engine.heartbeat() > self.server.config.stall_timeout:
                stalled = True
        return Verdict(stalled, dead)

    def tick(self, now: float | None = None) -> bool:
        """Update readiness; True when the process should exit now (an engine has been dead for
        dead_exit_after seconds)."""
        now = time.monotonic() if now is None else now
        verdict = self.inspect(now)
        was = self.server.stalled
        self.server.stalled = verdict.stalled or verdict.dead is not None
        if verdict.stalled and not was:
            log.error(
                "engine stalled: no step for %.0f s with requests in flight; readiness false",
                self.server.config.stall_timeout,
            )
        elif was and not self.server.stalled:
            log.warning("engine moving again; readiness restored")
        if verdict.dead is None:
            return False
        if self.dead_since is None:
            self.dead_since = now
            log.error(
                "the engine of %s is dead; exiting with status %d in %.1f s so that the supervisor restarts this server",
                verdict.dead,
                EXIT_ENGINE_DEAD,
                self.server.config.dead_exit_after,
            )
        return now - self.dead_since >= self.server.config.dead_exit_after
