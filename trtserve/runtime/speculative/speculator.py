"""Who speculates this step, and with which proposals: the scheduler asks, the engine core reports back."""

from __future__ import annotations

from trtserve.engine.messages import SpecCounts
from trtserve.engine.options import EngineOptions
from trtserve.engine.speculative import SpeculativeConfig
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.request import Request
from trtserve.runtime.speculative.proposer import NgramProposer, Proposer
from trtserve.runtime.speculative.state import PRIOR_ACCEPTED, SpecState, add_counts
from trtserve.runtime.speculative.switch import SpeculationSwitch


class Speculator:
    def __init__(self, config: SpeculativeConfig, proposer: Proposer | None = None):
        self.config = config
        self.switch = SpeculationSwitch(config.batch_limit, adaptive=config.max_batch_size is None)
        self.proposer = proposer or NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
        self.totals = SpecCounts()

    def active(self, running: list[Request]) -> bool:
        """Whether a step running these sequences speculates at all."""
        states = [r.spec for r in running if r.speculate]
        gain = sum(s.expected_accepted() if s is not None else PRIOR_ACCEPTED for s in states)
        if self.switch.decide(len(running), gain):
            return True
        for s in states:
            if s is not None:
                s.idle += 1
        return False

    def draft(self, r: Request, limit: int) -> list[int]:
        """Proposals for a decoding sequence's next step, at most `limit` of them; [] for a plain row."""
        if not r.speculate or limit <= 0:
            return []
        if r.spec is None:
            r.spec = SpecState()
        if not r.spec.wants_draft():
            return []
        return self.proposer.propose(r.all_token_ids, min(limit, self.config.num_speculative_tokens), r.seq)

    def forget(self, r: Request) -> None:
        self.proposer.forget(r.seq)

    def record(self, r: Request, proposed: int, accepted: int) -> None:
        r.spec.record(proposed, accepted, self.config.min_acceptance)  # type: ignore[union-attr]
        add_counts(self.totals, proposed, accepted)

    def totals_snapshot(self) -> SpecCounts:
        t = self.totals
        return SpecCounts(t.drafts, t.draft_tokens, t.accepted_tokens, list(t.accepted_per_position))


def make_speculator(config: SpeculativeConfig, target: LoadedEngine, options: EngineOptions) -> Speculator:
    """The speculator the `speculative` option asks for on this (target) engine."""
    if config.method == "ngram":
        return Speculator(config)
    from trtserve.runtime.speculative.draft import DraftProposer

    draft = DraftProposer.open(config.draft_engine_dir, target, options, config.batch_limit)  # type: ignore[arg-type]
    return Speculator(config, draft)
