"""Who speculates this step, and with which proposals: the scheduler asks, the engine core reports back."""

from __future__ import annotations

import math

from trtserve.engine.messages import SpecCounts
from trtserve.engine.options import EngineOptions
from trtserve.engine.speculative import SpeculativeConfig
from trtserve.runtime.loader import LoadedEngine
from trtserve.runtime.request import Request
from trtserve.runtime.speculative.proposer import NgramProposer, Proposer
from trtserve.runtime.speculative.state import WINDOW, SpecState, add_counts
from trtserve.runtime.speculative.switch import EVERYONE, PROBE, SpeculationSwitch


class Speculator:
    def __init__(self, config: SpeculativeConfig, proposer: Proposer | None = None, step_rows: int | None = None):
        """step_rows: the most rows a decode step runs at its fast cost (DecoderModel.decode_step_rows); a
        step's proposals stay within them (None: no limit)."""
        self.config = config
        self.switch = SpeculationSwitch(config.max_batch_size)
        self.step_rows = step_rows
        self._rows_left: float = math.inf  # this step's proposal rows left under step_rows (bar() sets it)
        self.proposer = proposer or NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
        self.totals = SpecCounts()
        self._probe: Request | None = None  # this step's probed sequence (switch.PROBE)

    def bar(self, running: list[Request]) -> float | None:
        """The accepted tokens per proposal a sequence must expect to speculate in a step running these
        sequences (switch.py), or None: none does. A probe picks the sequence held back longest."""
        bar = self.switch.bar(len(running))
        self._probe = None
        self._rows_left = math.inf if self.step_rows is None else self.step_rows - len(running)
        if bar == PROBE:
            held = [r for r in running if r.speculate]
            self._probe = max(held, key=lambda r: r.spec.idle if r.spec is not None else WINDOW, default=None)
            bar = math.inf
        elif bar is None:
            for r in running:
                if r.spec is not None:
                    r.spec.idle += 1
        return bar

    def draft(self, r: Request, limit: int, bar: float) -> list[int]:
        """Proposals for a decoding sequence's next step, at most `limit` of them; [] for a plain row: no
        guess, or fewer accepted tokens expected of it than `bar` per proposal."""
        if not r.speculate or limit <= 0:
            return []
        if r.spec is None:
            r.spec = SpecState()
        if not r.spec.wants_draft():
            return []
        k = min(limit, self.config.num_speculative_tokens, self._rows_left)
        held = bar > EVERYONE and r is not self._probe and r.spec.expected_accepted() <= bar * k
        if k <= 0 or held:  # decided before a draft model runs
            r.spec.idle += 1
            return []
        draft = self.proposer.propose(r.all_token_ids, k, r.seq)
        self._rows_left -= len(draft)
        return draft

    def forget(self, r: Request) -> None:
        self.proposer.forget(r.seq)

    def sleep(self) -> None:
        self.proposer.sleep()

    def wake_up(self) -> None:
        self.proposer.wake_up()

    def record(self, r: Request, proposed: int, accepted: int) -> None:
        r.spec.record(proposed, accepted, self.config.min_acceptance)  # type: ignore[union-attr]
        add_counts(self.totals, proposed, accepted)

    def totals_snapshot(self) -> SpecCounts:
        t = self.totals
        return SpecCounts(t.drafts, t.draft_tokens, t.accepted_tokens, list(t.accepted_per_position))


def make_speculator(config: SpeculativeConfig, target: LoadedEngine, options: EngineOptions) -> Speculator:
    """The speculator the `speculative` option asks for on this (target) engine."""
    rows = target.model.decode_step_rows()
    if config.method == "ngram":
        return Speculator(config, step_rows=rows)
    from trtserve.runtime.speculative.draft import DraftProposer

    draft = DraftProposer.open(config.draft_engine_dir, target, options, config.batch_limit)  # type: ignore[arg-type]
    return Speculator(config, draft, rows)
