"""Who speculates this step, and with which proposals: the scheduler asks, the engine core reports back."""

from __future__ import annotations

import math
from collections import deque

from trtserve.engine.options import EngineOptions
from trtserve.engine.speculative import SpeculativeConfig
from trtserve.engine.stats import SpecCounts
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
        self._planned: dict = {}  # this step's proposals by sequence (plan)
        self.proposer = proposer or NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
        self.totals = SpecCounts()

    def plan(self, running: list[Request], waiting: int = 0) -> None:
        """Decide which of these running sequences speculate in the step being scheduled (switch.py: the
        bar their expected accepted tokens must clear, a probe's one sequence) and propose for them, all
        at once (a draft model runs them as one batch); `draft` hands the proposals out. The step's
        proposals stay within step_rows: rows a guess did not use go to the next sequences in line.
        waiting: requests the scheduler holds back; with none, tokens count as `_worth` says."""
        self._planned = {}
        pending = deque(self._candidates(running, waiting))
        rows_left = math.inf if self.step_rows is None else self.step_rows - len(running)
        while pending and rows_left > 0:
            asks, room = [], rows_left
            while pending and room > 0:
                r, k = pending.popleft()
                asks.append((r, min(k, room)))
                room -= asks[-1][1]
            proposals = self.proposer.propose_batch([(r.all_token_ids, k, r.seq) for r, k in asks])
            for (r, _), p in zip(asks, proposals, strict=True):
                self._planned[r.seq] = p
                rows_left -= len(p)
        for r, _ in pending:  # no rows left for it this step (a candidate: _candidates gave it a SpecState)
            if r.spec is not None:
                r.spec.idle += 1

    def _candidates(self, running: list[Request], waiting: int) -> list[tuple[Request, int]]:
        """The decoding sequences that speculate this step, in order, with how many tokens each may propose."""
        bar = self.switch.bar(len(running))
        priced = bar is not None and bar > EVERYONE  # the bar is a price: tokens' worth matters (else all or none)
        worth = _worth(running) if priced and waiting == 0 and len(running) > 1 else None
        probe = None
        if bar == PROBE:
            held = [r for r in running if r.options.speculate]
            probe = max(held, key=lambda r: r.spec.idle if r.spec is not None else WINDOW, default=None)
            bar = math.inf
        out = []
        for r in running:
            if (
                not r.options.speculate
                or r.num_tokens - r.num_computed_tokens != 1
                or (r.params.n > 1 and not r.forked)
            ):
                continue  # opted out, not decoding, or about to fork (scheduler._draft)
            if r.spec is None:
                r.spec = SpecState()
            if not r.spec.wants_draft():
                continue
            k = min(self.config.num_speculative_tokens, r.params.max_tokens - len(r.output_token_ids) - 1)
            gain = r.spec.expected_accepted() * (1.0 if worth is None else worth.get(r.seq, 0.0))
            held = bar is None or (bar > EVERYONE and r is not probe and gain <= bar * k)
            if k <= 0 or held:
                r.spec.idle += 1
                continue
            out.append((r, k))
        return out

    def draft(self, r: Request, limit: int) -> list[int]:
        """This step's proposals for a decoding sequence (`plan`), at most `limit` of them; [] for a plain row."""
        return self._planned.get(r.seq, [])[: max(limit, 0)]

    def forget(self, r: Request) -> None:
        self.proposer.forget(r.seq)

    def sleep(self) -> None:
        self.proposer.sleep()

    def wake_up(self) -> None:
        self.proposer.wake_up()

    def record(self, r: Request, proposed: int, accepted: int) -> None:
        if r.spec is None:  # verified: it was a candidate, which always has its SpecState
            raise AssertionError(f"{r.seq} was verified without speculation state")
        r.spec.record(proposed, accepted, self.config.min_acceptance)
        add_counts(self.totals, proposed, accepted)

    def totals_snapshot(self) -> SpecCounts:
        t = self.totals
        return SpecCounts(t.drafts, t.draft_tokens, t.accepted_tokens, list(t.accepted_per_position))


def make_speculator(config: SpeculativeConfig, target: LoadedEngine, options: EngineOptions) -> Speculator:
    """The speculator the `speculative` option asks for on this (target) engine."""
    rows = target.model.decode_step_rows()
    if config.method == "ngram":
        vision = target.manifest.vision
        stop = frozenset(() if vision is None else (vision.image_token_id,))  # no guess runs into an image
        return Speculator(config, NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max, stop), rows)
    from trtserve.runtime.speculative.draft import DraftProposer

    draft = DraftProposer.open(config.draft_engine_dir, target, options, config.batch_limit)  # type: ignore[arg-type]
    return Speculator(config, draft, rows)


def _worth(running: list[Request]) -> dict:
    """With nothing waiting, what a sequence's accepted token is worth to the step rate the switch prices
    rows at: a closed batch runs until its longest sequence ends, so tokens off that path free a slot no
    request takes. 1/n for each of the n sequences with the most tokens still allowed (max_tokens: an
    end-of-sequence is not known ahead), nothing for the rest."""
    left = {r.seq: r.params.max_tokens - len(r.output_token_ids) for r in running}
    top = max(left.values())
    longest = [seq for seq, n in left.items() if n == top]
    return dict.fromkeys(longest, 1.0 / len(longest))
