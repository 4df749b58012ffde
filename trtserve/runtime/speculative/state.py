"""One sequence's speculative-decoding state: its counts and its rolling acceptance (the switch-off)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from trtserve.engine.stats import SpecCounts

WINDOW = 8  # drafts the rolling acceptance rate is taken over
RETRY_STEPS = 16  # decode steps a sequence below the acceptance floor runs plainly before it tries again
PRIOR_ACCEPTED = 1.0  # tokens a verification is expected to keep before a sequence has any of its own


@dataclass
class SpecState:
    counts: SpecCounts = field(default_factory=SpecCounts)
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=WINDOW))  # (accepted, proposed)
    paused: int = 0  # plain decode steps left before it speculates again
    idle: int = 0  # decode steps since its last verification, the switch having said no (probes pick the most)

    def expected_accepted(self) -> float:
        """Proposals its next verification is expected to keep: the mean over its recent ones, or the prior
        before it has any (a held-back sequence is tried again by the switch's probes)."""
        if self.paused:
            return 0.0
        if not self.recent:
            return PRIOR_ACCEPTED
        return sum(a for a, _ in self.recent) / len(self.recent)

    def wants_draft(self) -> bool:
        """Whether to propose for this step (counts a paused step down)."""
        if self.paused:
            self.paused -= 1
            return False
        return True

    def record(self, proposed: int, accepted: int, min_acceptance: float) -> None:
        """One verification: `accepted` of `proposed` tokens were kept (a prefix of the proposals)."""
        add_counts(self.counts, proposed, accepted)
        self.idle = 0
        self.recent.append((accepted, proposed))
        if len(self.recent) == WINDOW:
            rate = sum(a for a, _ in self.recent) / sum(p for _, p in self.recent)
            if rate < min_acceptance:
                self.paused = RETRY_STEPS
                self.recent.clear()  # a fresh window when it tries again

    def snapshot(self) -> SpecCounts:
        c = self.counts
        return SpecCounts(c.drafts, c.draft_tokens, c.accepted_tokens, list(c.accepted_per_position))


def add_counts(total: SpecCounts, proposed: int, accepted: int) -> None:
    """Engine-wide totals: one verification of `proposed` tokens, `accepted` kept."""
    total.drafts += 1
    total.draft_tokens += proposed
    total.accepted_tokens += accepted
    if len(total.accepted_per_position) < proposed:
        total.accepted_per_position += [0] * (proposed - len(total.accepted_per_position))
    for i in range(accepted):
        total.accepted_per_position[i] += 1
