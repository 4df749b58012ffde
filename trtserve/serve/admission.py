"""Admission control: a bounded queue of requests that have not started generating."""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.serve.errors import APIError


@dataclass
class Ticket:
    gate: Admission
    tokens: int
    queued: bool = True
    released: bool = False

    def started(self) -> None:
        """The request produced its first token: it no longer counts as queued."""
        if self.queued:
            self.queued = False
            self.gate.queued_requests -= 1
            self.gate.queued_tokens -= self.tokens

    def release(self) -> None:
        """Idempotent: a run that was admitted but never iterated (cancelled first) is released by
        whoever admitted it, and a run that did iterate released itself."""
        if self.released:
            return
        self.released = True
        self.started()
        self.gate.in_flight -= 1


class Admission:
    """Single-event-loop bookkeeping (no locks needed): queued and in-flight counts."""

    def __init__(self, max_requests: int, max_tokens: int):
        self.max_requests, self.max_tokens = max_requests, max_tokens
        self.queued_requests = self.queued_tokens = self.in_flight = 0
        self.draining = False

    def enter(self, prompt_tokens: int) -> Ticket:
        if self.draining:
            raise APIError(503, "the server is shutting down; retry on another replica", headers={"Retry-After": "5"})
        if self.queued_requests + 1 > self.max_requests or self.queued_tokens + prompt_tokens > self.max_tokens:
            raise APIError(
                429,
                f"the server's queue is full ({self.queued_requests} requests, {self.queued_tokens} prompt tokens waiting); retry later",
                headers={"Retry-After": "1"},
            )
        self.queued_requests += 1
        self.queued_tokens += prompt_tokens
        self.in_flight += 1
        return Ticket(self, prompt_tokens)
